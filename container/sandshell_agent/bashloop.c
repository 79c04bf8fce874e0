/* sandshell's command loop: a bash builtin, loaded into the model's shell with `enable -f`.

   `__ss_loop STATUS_FD ERROR_FD STATE_DIR COUNTER SETUP` runs SETUP (the saved state of a shell
   this one replaces, and its cwd), then for ever: reads a command from bash's input (a 32-digit
   nonce, a 10-digit length, the command's bytes), checks its syntax with bash's own parser, runs
   it as `eval` would (stdin at /dev/null, `$?` the last command's status), writes
   `nonce NUL rc NUL cwd NUL how NUL` to STATUS_FD, saves the exports and functions a new shell
   would start from into STATE_DIR (only when they changed) and writes `nonce NUL done NUL`.
   Nothing of it is shell code, so none of it shows in `set -x`, runs a DEBUG trap, or can be
   redefined by the model; the nonce is never in a shell variable. The bash functions of
   wrapper.py still do what traps do (the EXIT and USR2 traps save the state of a shell that ends).

   It declares what it uses of bash (stable since bash 4) instead of including bash's headers, so
   any C compiler builds it; it uses only libc functions every glibc since 2.2.5 has. */

#define _DEFAULT_SOURCE /* syscall(); not _GNU_SOURCE, whose C2x strtol needs glibc 2.38 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct word_desc {
  char *word;
  int flags;
} WORD_DESC;
typedef struct word_list {
  struct word_list *next;
  WORD_DESC *word;
} WORD_LIST;
typedef int sh_builtin_func_t(WORD_LIST *);
struct builtin {
  char *name;
  sh_builtin_func_t *function;
  int flags;
  char *const *long_doc;
  const char *short_doc;
  char *handle;
};

#define BUILTIN_ENABLED 0x01
#define SEVAL_NOHIST 0x004
#define SEVAL_NOFREE 0x008
#define SEVAL_RESETLINE 0x010
#define SEVAL_PARSEONLY 0x020
#define EXIT_TRAP 0

extern int parse_and_execute(char *, const char *, int);
extern int last_command_exit_value;
extern volatile sig_atomic_t terminating_signal;
extern void termsig_handler(int);
extern void run_pending_traps(void);
extern void exit_shell(int);
extern void unlink_fifo_list(void);
extern char *trap_list[];
extern struct builtin *builtin_address_internal(char *, int);
extern char *get_string_value(const char *);
extern void *bind_variable(const char *, char *, int);
extern WORD_DESC *make_word(const char *);
extern WORD_LIST *make_word_list(WORD_DESC *, WORD_LIST *);
extern void dispose_words(WORD_LIST *);
extern int export_builtin(WORD_LIST *);
extern int declare_builtin(WORD_LIST *);
extern void builtin_error(const char *, ...);
extern char *this_command_name;
extern sh_builtin_func_t *this_shell_builtin;
extern int echo_command_at_execute, echo_input_at_read, exit_immediately_on_error, unbound_vars_is_error;

/* BLAKE2s (RFC 7693), keyed: each record ends with its tag under a key the agent gave this loop
   before any of the model's code ran, kept nowhere but here. A process that reads the next
   command off bash's input learns its nonce, not the key, so it cannot pass for the loop. */
typedef struct {
  uint32_t h[8], t[2];
  uint8_t b[64];
  size_t c;
} blake2s;

static const uint32_t IV[8] = {0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A,
                               0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19};
static const uint8_t SIGMA[10][16] = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, {14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3},
    {11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4}, {7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8},
    {9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13}, {2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9},
    {12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11}, {13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10},
    {6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5}, {10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0}};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define G(a, b, c, d, x, y)                                                                                            \
  do {                                                                                                                 \
    v[a] += v[b] + (x), v[d] = ROTR(v[d] ^ v[a], 16), v[c] += v[d], v[b] = ROTR(v[b] ^ v[c], 12);                     \
    v[a] += v[b] + (y), v[d] = ROTR(v[d] ^ v[a], 8), v[c] += v[d], v[b] = ROTR(v[b] ^ v[c], 7);                       \
  } while (0)

static void compress(blake2s *s, int last) {
  uint32_t v[16], m[16];
  for (int i = 0; i < 8; i++)
    v[i] = s->h[i], v[i + 8] = IV[i];
  v[12] ^= s->t[0], v[13] ^= s->t[1];
  if (last)
    v[14] = ~v[14];
  for (int i = 0; i < 16; i++)
    m[i] = (uint32_t)s->b[4 * i] | (uint32_t)s->b[4 * i + 1] << 8 | (uint32_t)s->b[4 * i + 2] << 16 |
           (uint32_t)s->b[4 * i + 3] << 24;
  for (int r = 0; r < 10; r++) {
    const uint8_t *z = SIGMA[r];
    G(0, 4, 8, 12, m[z[0]], m[z[1]]);
    G(1, 5, 9, 13, m[z[2]], m[z[3]]);
    G(2, 6, 10, 14, m[z[4]], m[z[5]]);
    G(3, 7, 11, 15, m[z[6]], m[z[7]]);
    G(0, 5, 10, 15, m[z[8]], m[z[9]]);
    G(1, 6, 11, 12, m[z[10]], m[z[11]]);
    G(2, 7, 8, 13, m[z[12]], m[z[13]]);
    G(3, 4, 9, 14, m[z[14]], m[z[15]]);
  }
  for (int i = 0; i < 8; i++)
    s->h[i] ^= v[i] ^ v[i + 8];
}

static void update(blake2s *s, const void *data, size_t n) {
  const uint8_t *p = data;
  for (size_t i = 0; i < n; i++) {
    if (s->c == 64) {
      s->t[0] += 64;
      if (s->t[0] < 64)
        s->t[1]++;
      compress(s, 0);
      s->c = 0;
    }
    s->b[s->c++] = p[i];
  }
}

#define TAG 16
static uint8_t key[32];

static void tag(const char *data, size_t n, char *hex) {
  blake2s s = {.c = 0};
  memcpy(s.h, IV, sizeof IV);
  s.h[0] ^= 0x01010000 ^ (uint32_t)sizeof key << 8 ^ TAG;
  update(&s, key, sizeof key);
  memset(s.b + s.c, 0, 64 - s.c); /* the key fills a block of its own */
  s.c = 64;
  update(&s, data, n);
  s.t[0] += (uint32_t)s.c;
  if (s.t[0] < s.c)
    s.t[1]++;
  memset(s.b + s.c, 0, 64 - s.c);
  compress(&s, 1);
  for (int i = 0; i < TAG; i++)
    hex[2 * i] = "0123456789abcdef"[(s.h[i / 4] >> (8 * (i % 4)) >> 4) & 15],
            hex[2 * i + 1] = "0123456789abcdef"[(s.h[i / 4] >> (8 * (i % 4))) & 15];
  hex[2 * TAG] = '\0';
}

#define NONCE 32
#define LENGTH 10
#define OWN_FDS 202 /* bash's input and /dev/null are moved to the first free numbers from here */
#define COMMAND_MAX (8 << 20) /* the agent sends at most 256 KiB; anything longer is not from it */
#define WHOLE "# sandshell: whole"

static int status_fd = -1, error_fd = -1, input_fd = -1, null_fd = -1;
static const char *state_dir, *counter;
static long saves;
static char *last_state;
static size_t last_state_len;
static sh_builtin_func_t *real_enable;

/* Signals that arrived while we waited: a trap the model set, or the USR2 that ends the shell. */
static void pending(void) {
  if (terminating_signal)
    termsig_handler(terminating_signal);
  run_pending_traps();
}

static int read_full(int fd, char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r > 0)
      got += (size_t)r;
    else if (r < 0 && errno == EINTR)
      pending();
    else
      return -1;
  }
  return 0;
}

static int write_full(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w > 0) {
      buf += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      return -1; /* the agent is gone (it hears the shell's end elsewhere), or a file is full */
    }
  }
  return 0;
}

/* "nonce NUL field NUL ... tag NUL" in one write, so the agent never sees half a record; the tag is
   over everything before it. */
static void record(const char *nonce, const char **fields, int count) {
  size_t size = NONCE + 1 + 2 * TAG + 1, at;
  for (int i = 0; i < count; i++)
    size += strlen(fields[i]) + 1;
  char *buf = malloc(size);
  if (buf == NULL)
    return;
  memcpy(buf, nonce, NONCE);
  buf[NONCE] = '\0';
  at = NONCE + 1;
  for (int i = 0; i < count; i++) {
    size_t len = strlen(fields[i]) + 1;
    memcpy(buf + at, fields[i], len);
    at += len;
  }
  tag(buf, at, buf + at);
  write_full(status_fd, buf, size);
  free(buf);
}

static char *number(long n, char *buf, size_t size) {
  char *p = buf + size - 1;
  int negative = n < 0;
  unsigned long u = negative ? (unsigned long)-n : (unsigned long)n;
  *p = '\0';
  do {
    *--p = (char)('0' + u % 10);
    u /= 10;
  } while (u && p > buf + 1);
  if (negative)
    *--p = '-';
  return p;
}

/* A builtin called as the shell would call it (`declare -f` prints a `declare -f NAME` line after
   each function when it takes itself for `export` or `readonly`). */
static int run_builtin(sh_builtin_func_t *f, char *name, const char *option) {
  char *was = this_command_name;
  sh_builtin_func_t *was_builtin = this_shell_builtin;
  WORD_LIST *args = make_word_list(make_word(option), NULL);
  this_command_name = name;
  this_shell_builtin = f;
  int r = f(args);
  this_command_name = was;
  this_shell_builtin = was_builtin;
  dispose_words(args);
  return r;
}

/* The state script, opened for a new copy: never through a link, never waiting on a FIFO; whatever
   is there that is not a regular file (the model may put anything there) is taken away first. */
static int open_state(const char *path) {
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st;
    if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 /* not fstat(): glibc has it since 2.33 only */ && S_ISREG(st.st_mode))
      return fd;
    if (fd >= 0)
      close(fd);
    if (unlink(path) != 0 && rmdir(path) != 0 && errno != ENOENT)
      return -1;
  }
  return -1;
}

/* The exports and functions, as `export -p; declare -f` print them, into the next of the two state
   scripts (wrapper.STATE_SCRIPTS), ending with its number once written whole; skipped when they are
   what was saved last (`write` 0: only remember them). The file is opened without following a
   link or waiting on a FIFO. */
static void save_state(int write) {
  char *text = NULL;
  size_t len = 0;
  FILE *memory = open_memstream(&text, &len);
  if (memory == NULL)
    return;
  FILE *real = stdout;
  fflush(stdout);
  stdout = memory;
  run_builtin(export_builtin, "export", "-p");
  run_builtin(declare_builtin, "declare", "-f");
  stdout = real;
  if (fclose(memory) != 0) {
    free(text);
    return;
  }
  if (!write || (last_state != NULL && len == last_state_len && memcmp(text, last_state, len) == 0)) {
    free(last_state);
    last_state = text;
    last_state_len = len;
    return;
  }
  char path[4096], digits[32], mark[64];
  long n = saves + 1;
  snprintf(path, sizeof path, "%s/state%ld.sh", state_dir, n % 2);
  int fd = open_state(path);
  if (fd < 0) {
    free(text);
    return;
  }
  int mlen = snprintf(mark, sizeof mark, "%s %ld\n", WHOLE, n);
  int written = write_full(fd, text, len) == 0 && write_full(fd, mark, (size_t)mlen) == 0;
  if (close(fd) != 0 || !written) { /* `ulimit -f`, a full disk: the other script, whole, is the last saved */
    free(text);
    return;
  }
  saves = n;
  bind_variable(counter, number(n, digits, sizeof digits), 0);
  free(last_state);
  last_state = text;
  last_state_len = len;
}

static int ours(const char *trap) {
  return trap == (char *)SIG_IGN || (trap != NULL && trap != (char *)SIG_DFL && strncmp(trap, "\\__ss_end", 9) == 0);
}

/* Run wrapper code (a readonly bash function) with the model's tracing and errexit set aside, and
   `$_` as the command left it. */
static void wrapper(const char *code) {
  int x = echo_command_at_execute, v = echo_input_at_read, e = exit_immediately_on_error, u = unbound_vars_is_error;
  const char *last = get_string_value("_");
  char *underscore = last ? strdup(last) : NULL;
  echo_command_at_execute = echo_input_at_read = exit_immediately_on_error = unbound_vars_is_error = 0;
  parse_and_execute((char *)code, "sandshell", SEVAL_NOHIST | SEVAL_NOFREE);
  echo_command_at_execute = x, echo_input_at_read = v, exit_immediately_on_error = e, unbound_vars_is_error = u;
  if (underscore != NULL) {
    bind_variable("_", underscore, 0);
    free(underscore);
  }
}

/* The syntax check: parsed whole, nothing run; errors go to the shell's first stderr. */
static int parses(char *command) {
  int saved = fcntl(2, F_DUPFD_CLOEXEC, 10);
  dup2(error_fd, 2);
  int r = parse_and_execute(command, "eval", SEVAL_NOHIST | SEVAL_NOFREE | SEVAL_RESETLINE | SEVAL_PARSEONLY);
  if (saved >= 0) {
    dup2(saved, 2);
    close(saved);
  } else {
    close(2);
  }
  return r == 0;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int parse_fd(WORD_LIST *w) {
  return w && w->word->word[0] >= '0' && w->word->word[0] <= '9' ? atoi(w->word->word) : -1;
}

static int loop_builtin(WORD_LIST *list) {
  status_fd = parse_fd(list);
  error_fd = parse_fd(list ? list->next : NULL);
  WORD_LIST *rest = list && list->next ? list->next->next : NULL;
  if (status_fd < 0 || error_fd < 0 || !rest || !rest->next || !rest->next->next) {
    builtin_error("usage: __ss_loop STATUS_FD ERROR_FD STATE_DIR COUNTER SETUP");
    return 2;
  }
  state_dir = strdup(rest->word->word);
  counter = strdup(rest->next->word->word);
  char *setup = strdup(rest->next->next->word->word);
  const char *saved = get_string_value(counter);
  saves = saved ? atol(saved) : 0;
  /* The agent's channels reach no program the model starts; its input leaves fd 0 for /dev/null. */
  /* Past the numbers scripts use (3-9) and bash saves its own on (10 and up), next to the
     status channel (200) and the shell's first stderr (201). */
  input_fd = fcntl(0, F_DUPFD_CLOEXEC, OWN_FDS);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  null_fd = null < 0 ? -1 : fcntl(null, F_DUPFD_CLOEXEC, OWN_FDS);
  if (null >= 0)
    close(null);
  fcntl(status_fd, F_SETFD, FD_CLOEXEC);
  fcntl(error_fd, F_SETFD, FD_CLOEXEC);
  if (input_fd < 0 || null_fd < 0) {
    builtin_error("cannot set up the command loop: %s", strerror(errno));
    return 2;
  }
  char hexkey[2 * sizeof key];
  if (read_full(input_fd, hexkey, sizeof hexkey) != 0)
    exit_shell(2);
  for (size_t i = 0; i < sizeof key; i++) {
    int hi = hexval(hexkey[2 * i]), lo = hexval(hexkey[2 * i + 1]);
    if (hi < 0 || lo < 0)
      exit_shell(2);
    key[i] = (uint8_t)(hi << 4 | lo);
  }
  dup2(null_fd, 0);
  parse_and_execute(setup, "sandshell", SEVAL_NOHIST);
  save_state(0); /* what the state scripts hold already (or what a new shell starts with) */
  char head[NONCE + LENGTH], nonce[NONCE + 1];
  int last = 0;
  for (;;) {
    if (read_full(input_fd, head, sizeof head) != 0)
      exit_shell(last);
    memcpy(nonce, head, NONCE);
    nonce[NONCE] = '\0';
    size_t size = 0;
    for (int i = NONCE; i < NONCE + LENGTH; i++) {
      if (head[i] < '0' || head[i] > '9')
        exit_shell(2); /* not the agent's framing: nothing more of this input can be trusted */
      size = size * 10 + (size_t)(head[i] - '0');
    }
    char *command = size <= COMMAND_MAX ? malloc(size + 1) : NULL;
    if (command == NULL || read_full(input_fd, command, size) != 0)
      exit_shell(2);
    command[size] = '\0';
    const char *how = "ran";
    if (memchr(command, '\0', size) != NULL || !parses(command)) {
      how = "syntax";
      last = 2;
    } else {
      if (dup2(null_fd, 0) < 0) /* the model closed it: stdin is then what it left on fd 0 */
        close(0);
      last_command_exit_value = last;
      last = parse_and_execute(command, "eval", SEVAL_NOHIST | SEVAL_NOFREE | SEVAL_RESETLINE);
      unlink_fifo_list();
    }
    free(command);
    last_command_exit_value = last;
    char digits[32];
    const char *cwd = get_string_value("PWD");
    const char *fields[] = {number(last, digits, sizeof digits), cwd ? cwd : "", how};
    record(nonce, fields, 3);
    if (!ours(trap_list[EXIT_TRAP]) || !ours(trap_list[SIGUSR2]))
      wrapper("\\__ss_arm");
    save_state(1);
    /* A signal that came meanwhile, before the word that the save is done: SIGXFSZ from the save
       under `ulimit -f 0` ends the shell here, and the agent, hearing no "done", starts a new one
       before it gives this one the next command. */
    pending();
    const char *done[] = {"done"};
    record(nonce, done, 1);
    last_command_exit_value = last;
  }
}

/* `enable -f` would load code into this shell that could write any record; `enable -d` would
   unload the loop while it runs. Both are refused; everything else goes to bash's own `enable`. */
static int enable_guard(WORD_LIST *list) {
  for (WORD_LIST *w = list; w; w = w->next) {
    const char *word = w->word->word;
    if (word[0] != '-' || strcmp(word, "--") == 0)
      break;
    if (strpbrk(word + 1, "fd") != NULL) {
      builtin_error("sandshell: loading or unloading builtins (enable -f, -d) is off in this shell");
      return 2;
    }
  }
  return real_enable(list);
}

int __ss_loop_builtin_load(char *name) {
  (void)name;
  struct builtin *enable = builtin_address_internal("enable", 1);
  if (enable != NULL && enable->function != enable_guard) {
    real_enable = enable->function;
    enable->function = enable_guard;
  }
  return 1;
}

static char *loop_doc[] = {"The sandshell agent's command loop.", NULL};

struct builtin __ss_loop_struct = {
    "__ss_loop", loop_builtin, BUILTIN_ENABLED, loop_doc, "__ss_loop STATUS_FD ERROR_FD STATE_DIR COUNTER SETUP", 0,
};
