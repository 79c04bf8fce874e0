/* sandshell's command loop: two bash builtins, loaded into the model's shell with `enable -f`.

   `__ss_loop STATUS_FD ERROR_FD STATE_DIR SAVED SETUP` reads a key (64 hex digits) off bash's input,
   runs SETUP (the state of a shell this one replaces, and its cwd), then for ever: reads a command
   (a 32-digit nonce, a 10-digit length, the agent's tag of both and of the command, the command's
   bytes) and checks the tag, checks the command's syntax with bash's own parser, runs it as `eval`
   would (stdin at /dev/null, `$?` the last command's status), writes `nonce NUL rc NUL cwd NUL how
   NUL tag NUL` to STATUS_FD, puts its EXIT and USR2 traps back around the model's, saves the exports
   and functions a new shell would start from into STATE_DIR (when they changed) and writes
   `nonce NUL done NUL tag NUL`. `__ss_end` is what those traps run: it saves the state and where the
   shell is; `__ss_end exit N` then exits.

   None of it is shell code, so none of it shows in `set -x`, runs a DEBUG trap, or can be stood in
   for by the model's functions or aliases; the key and the nonce are in no shell variable. Records
   carry a tag under the key, which the agent sent before any of the model's code ran, and the loop
   reads only from the input it was started with: a process that gets hold of that input can read
   commands off it, never put one in or pass a record.

   It declares what it uses of bash (stable since bash 4) instead of including bash's headers, so
   any C compiler builds it; it uses only libc functions every glibc since 2.14 has. */

#define _DEFAULT_SOURCE /* syscall(); not _GNU_SOURCE, whose C2x strtol needs glibc 2.38 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "blake2s.h"

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
typedef struct variable { /* as bash 4 and 5 lay it out (variables.h) */
  char *name;
  char *value; /* a string, or an array's ARRAY or HASH_TABLE */
  char *exportstr;
  void *dynamic_value;
  void *assign_func;
  int attributes;
  int context;
} SHELL_VAR;
typedef int sh_var_map_func_t(SHELL_VAR *);

#define BUILTIN_ENABLED 0x01
#define SEVAL_NOHIST 0x004
#define SEVAL_NOFREE 0x008
#define SEVAL_RESETLINE 0x010
#define SEVAL_PARSEONLY 0x020
#define EXIT_TRAP 0
#define FUNC_MULTILINE 0x01
#define FUNC_EXTERNAL 0x02
#define ATT_EXPORTED 0x0000001
#define ATT_ARRAY 0x0000004
#define ATT_ASSOC 0x0000040

extern int parse_and_execute(char *, const char *, int);
extern int last_command_exit_value, read_but_dont_execute, extended_glob, posixly_correct;
extern volatile sig_atomic_t terminating_signal;
extern void termsig_handler(int);
extern void run_pending_traps(void);
extern void exit_shell(int);
extern void unlink_fifo_list(void);
extern char *trap_list[];
extern void set_signal(int, char *);
extern struct builtin *builtin_address_internal(char *, int);
extern char *get_string_value(const char *);
extern SHELL_VAR *find_function(const char *);
extern SHELL_VAR **all_shell_functions(void);
extern SHELL_VAR **map_over(sh_var_map_func_t *, void *);
extern void *shell_variables, *global_variables;
extern int unbind_func(const char *);
extern int legal_identifier(const char *);
extern char *named_function_string(char *, void *, int);
extern WORD_DESC *make_word(const char *);
extern WORD_LIST *make_word_list(WORD_DESC *, WORD_LIST *);
extern void dispose_words(WORD_LIST *);
extern int export_builtin(WORD_LIST *);
extern int declare_builtin(WORD_LIST *);
extern void builtin_error(const char *, ...);
extern char *this_command_name;
extern sh_builtin_func_t *this_shell_builtin;

#define NONCE 32
#define LENGTH 10
#define HEAD (NONCE + LENGTH + 2 * TAG)
#define COMMAND_MAX (8 << 20) /* the agent sends at most 256 KiB; anything longer is not from it */
#define CWD_MAX 4096          /* a longer $PWD is not reported: the agent asks the kernel */
#define OWN_FDS 202           /* bash's input and /dev/null move to the first free numbers from here */
#define WHOLE "# sandshell: whole"
#define END "__ss_end"

static int status_fd = -1, error_fd = -1, input_fd = -1, null_fd = -1, running;
static FILE *error_file; /* the shell's first stderr (error_fd), unbuffered */
static dev_t input_dev;
static ino_t input_ino;
static char *state_dir;
static long saves;
static char *last_state;
static size_t last_state_len;
static char *last_exports, *last_source; /* `export -p`'s last text, and what it was printed from */
static size_t last_exports_len, last_source_len;
static sh_builtin_func_t *real_enable;

/* Signals that arrived while we waited: a trap the model set, or one that ends the shell. */
static void pending(void) {
  if (terminating_signal)
    termsig_handler(terminating_signal);
  run_pending_traps();
}

static int read_full(int fd, char *buf, size_t n) {
  for (size_t got = 0; got < n;) {
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

/* Bash's input through a buffer: a command's head and bytes in one read (the agent sends a command
   only once the last one's save is done, so what is read belongs to this command). */
static char input_buf[16384];
static size_t input_at, input_end;

static int read_input(char *buf, size_t n) {
  while (n > 0) {
    if (input_at == input_end) {
      ssize_t r = read(input_fd, input_buf, sizeof input_buf);
      if (r > 0)
        input_at = 0, input_end = (size_t)r;
      else if (r < 0 && errno == EINTR)
        pending();
      else
        return -1;
      continue;
    }
    size_t take = input_end - input_at < n ? input_end - input_at : n;
    memcpy(buf, input_buf + input_at, take);
    input_at += take, buf += take, n -= take;
  }
  return 0;
}

static int write_full(int fd, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, buf, n);
    if (w > 0)
      buf += w, n -= (size_t)w;
    else if (w >= 0 || errno != EINTR)
      return -1; /* the agent is gone (it hears the shell's end elsewhere), or a file is full */
  }
  return 0;
}

/* "nonce NUL field NUL ... tag NUL" in one write, so the agent never sees half a record. */
static void record(const char *nonce, const char **fields, int count) {
  size_t size = NONCE + 1 + 2 * TAG + 1, at = NONCE + 1;
  for (int i = 0; i < count; i++)
    size += strlen(fields[i]) + 1;
  char *buf = malloc(size);
  if (buf == NULL)
    return;
  memcpy(buf, nonce, NONCE);
  buf[NONCE] = '\0';
  for (int i = 0; i < count; i++) {
    size_t len = strlen(fields[i]) + 1;
    memcpy(buf + at, fields[i], len);
    at += len;
  }
  tag(buf, at, buf + at);
  write_full(status_fd, buf, size);
  free(buf);
}

/* Dies with a word on the shell's first stderr: what comes on its input can no longer be trusted. */
static void give_up(const char *why) {
  dprintf(error_fd, "sandshell: %s; a new shell starts\n", why);
  exit_shell(2);
}

/* A builtin called as the shell calls it (`declare -f` prints `declare -f NAME` lines after the
   functions when it takes itself for `export` or `readonly`). */
static int run_builtin(sh_builtin_func_t *f, char *name, WORD_LIST *args) {
  char *was = this_command_name;
  sh_builtin_func_t *was_builtin = this_shell_builtin;
  this_command_name = name, this_shell_builtin = f;
  int r = f(args);
  this_command_name = was, this_shell_builtin = was_builtin;
  dispose_words(args);
  return r;
}

/* A state file opened for a new copy: never through a link, never waiting on a FIFO; whatever is
   there that is not a regular file (the model may put anything there) is taken away first. */
static int open_state(const char *name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", state_dir, name);
  for (int attempt = 0; attempt < 2; attempt++) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    struct stat st; /* fstat() through syscall(): glibc has the symbol since 2.33 only */
    if (fd >= 0 && syscall(SYS_fstat, fd, &st) == 0 && S_ISREG(st.st_mode))
      return fd;
    if (fd >= 0)
      close(fd);
    if (unlink(path) != 0 && rmdir(path) != 0 && errno != ENOENT)
      return -1;
  }
  return -1;
}

/* The functions, as `declare -f` prints them; but `declare -f` writes a function named like an
   assignment (`function a=b {...}` is allowed) as `a=b () ...`, which reads back as an assignment
   and ended the restore there: such names are written after the others, with `function ` in front. */
static void functions(void) {
  SHELL_VAR **all = all_shell_functions();
  WORD_LIST *legal = NULL;
  size_t n = 0;
  while (all && all[n])
    n++;
  for (size_t i = n; i-- > 0;)
    if (legal_identifier(all[i]->name))
      legal = make_word_list(make_word(all[i]->name), legal);
  if (legal != NULL) /* (with no name, `declare -f` would print them all) */
    run_builtin(declare_builtin, "declare", make_word_list(make_word("-f"), legal));
  for (size_t i = 0; i < n; i++)
    if (!legal_identifier(all[i]->name))
      printf("function %s\n", named_function_string(all[i]->name, all[i]->value, FUNC_MULTILINE | FUNC_EXTERNAL));
  free(all);
}

static int exported(SHELL_VAR *var) {
  return (var->attributes & ATT_EXPORTED) != 0;
}

/* What `export -p` prints from, copied without formatting: each exported variable's attributes,
   name and value, in the variable table's order. Its text can change only when this does (a change
   of order alone costs one printing more; a change of locale may quote a value another way, which
   reads back the same). NULL when it cannot be told: in a function's or an `eval`'s scope (where a
   variable not exported can hide an exported one of the same name from `export -p`, a trap's save),
   for an exported array, whose value is no string, or without memory; then it is printed. The save
   after every command was most of the shell's own work for a `true`, `export -p`'s sorting, quoting
   and printf a share of it (docs/benchmarks.md). */
static char *export_source(size_t *size) {
  if (shell_variables != global_variables)
    return NULL;
  SHELL_VAR **all = map_over(exported, shell_variables);
  size_t len = 0;
  for (size_t i = 0; all && all[i]; i++) {
    if (all[i]->attributes & (ATT_ARRAY | ATT_ASSOC)) {
      free(all);
      return NULL;
    }
    char *value = all[i]->value; /* attributes, name NUL, mark, value NUL: */
    len += sizeof(int) + strlen(all[i]->name) + 1 + 1 + (value ? strlen(value) + 1 : 0);
  }
  char *source = malloc(len + 1), *at = source;
  for (size_t i = 0; source && all && all[i]; i++) {
    SHELL_VAR *var = all[i];
    memcpy(at, &var->attributes, sizeof(int));
    at += sizeof(int);
    at = stpcpy(at, var->name) + 1;
    *at++ = var->value ? '=' : '-'; /* a value (maybe ""), or none */
    at = var->value ? stpcpy(at, var->value) + 1 : at;
  }
  free(all);
  *size = source ? (size_t)(at - source) : 0;
  return source;
}

/* `export -p` into the state being written (the first thing written there: `*text` is then the
   whole of it): printed when its source changed, else the last text. */
static void exports(FILE *memory, char **text, size_t *len) {
  size_t size = 0;
  char *source = export_source(&size);
  if (source != NULL && last_source != NULL && size == last_source_len && memcmp(source, last_source, size) == 0) {
    free(source);
    fwrite(last_exports, 1, last_exports_len, stdout);
    return;
  }
  int printed = run_builtin(export_builtin, "export", make_word_list(make_word("-p"), NULL)) == 0;
  free(last_source), free(last_exports);
  last_source = NULL, last_exports = NULL; /* (kept only together, and only a whole text) */
  char *copy = printed && source != NULL && fflush(memory) == 0 ? malloc(*len + 1) : NULL;
  if (copy == NULL) {
    free(source);
    return;
  }
  last_source = source, last_source_len = size;
  last_exports = memcpy(copy, *text, *len), last_exports_len = *len;
}

/* The exports and functions, as `export -p; declare -f` print them (with the two options reading them
   back depends on), into the next of the two state scripts (wrapper.STATE_SCRIPTS), ending with its
   number once written whole; skipped when they are what was saved last (`write` 0: only remember them). */
static void save_state(int write) {
  char *text = NULL, name[32], mark[64];
  size_t len = 0;
  FILE *memory = open_memstream(&text, &len), *real = stdout;
  if (memory == NULL)
    return;
  fflush(stdout);
  stdout = memory;
  int posix = posixly_correct;
  posixly_correct = 0; /* `declare -x` lines: posix mode's `export X=...` of a readonly X (an exported
                          SHELLOPTS) read back in posix mode is an error that ends the shell */
  exports(memory, &text, &len);
  posixly_correct = posix;
  /* Read back with bash's own defaults: an exported POSIXLY_CORRECT has just turned posix mode on
     (where `function a=b` is an error that ends the shell: every replacement died in its setup),
     and a function may use extended patterns (a syntax error without extglob, which ended the
     restore there). After them, both options as the model had them. */
  printf("builtin set +o posix; builtin shopt -s extglob\n");
  functions();
  printf("builtin shopt -%c extglob; builtin set %co posix\n", extended_glob ? 's' : 'u', posix ? '-' : '+');
  stdout = real;
  if (fclose(memory) != 0)
    return;
  if (!write || (last_state != NULL && len == last_state_len && memcmp(text, last_state, len) == 0)) {
    free(last_state);
    last_state = text, last_state_len = len;
    return;
  }
  long n = saves + 1;
  snprintf(name, sizeof name, "state%ld.sh", n % 2);
  int fd = open_state(name), mlen = snprintf(mark, sizeof mark, "%s %ld\n", WHOLE, n);
  int whole = fd >= 0 && write_full(fd, text, len) == 0 && write_full(fd, mark, (size_t)mlen) == 0;
  if ((fd >= 0 && close(fd) != 0) || !whole) { /* `ulimit -f`, a full disk: the other one is the last */
    free(text);
    return;
  }
  saves = n;
  free(last_state);
  last_state = text, last_state_len = len;
}

/* `__ss_end`: the traps' part (EXIT, TERM, USR2): the state, then which save it goes with and where
   the shell is (wrapper.CWD_FILE); `__ss_end exit N`: then `exit N`, through bash's own `exit`. */
static int end_builtin(WORD_LIST *list) {
  if (list && strcmp(list->word->word, "exit") == 0) {
    struct builtin *exit_ = builtin_address_internal("exit", 1);
    return exit_->function(list->next);
  }
  save_state(1);
  const char *cwd = get_string_value("PWD");
  int fd = open_state("cwd");
  if (fd >= 0) {
    dprintf(fd, "%ld\n%s", saves, cwd ? cwd : "");
    close(fd);
  }
  return 0;
}

/* Our part of a trap put back in front of whatever the model's trap runs (`suffix` after it);
   a trap that is ours already, or a signal the model ignores, is left as it is. */
static void arm(int sig, const char *suffix) {
  char *now = trap_list[sig];
  if (now == (char *)SIG_IGN || (now != NULL && strncmp(now, END, sizeof END - 1) == 0))
    return;
  const char *model = now == NULL || now == (char *)SIG_DFL ? "" : now;
  size_t size = sizeof END + strlen(model) + strlen(suffix) + 2;
  char *trap = malloc(size);
  if (trap == NULL)
    return;
  snprintf(trap, size, "%s%s%s%s", END, *model ? "\n" : "", model, suffix);
  set_signal(sig, trap);
  free(trap);
}

/* After each command: no function of the model's stands in for `__ss_end`, the builtin is enabled,
   and the traps that run it are set. */
static void rearm(void) {
  if (find_function(END) != NULL)
    unbind_func(END);
  struct builtin *end = builtin_address_internal(END, 1);
  if (end != NULL)
    end->flags |= BUILTIN_ENABLED;
  arm(EXIT_TRAP, "");
  arm(SIGUSR2, "\n" END " exit 143");
}

/* The syntax check: parsed whole, nothing run (whatever `set -n` the model left), extended
   patterns allowed (a command may turn `extglob` on before it uses them); errors go to the shell's
   first stderr. */
static int parses(char *command) {
  FILE *real = stderr; /* bash's parser writes its errors to `stderr`: pointed there, no descriptor moves */
  int extglob = extended_glob;
  if (error_file != NULL)
    stderr = error_file;
  extended_glob = 1;
  int r = parse_and_execute(command, "eval", SEVAL_NOHIST | SEVAL_NOFREE | SEVAL_RESETLINE | SEVAL_PARSEONLY);
  extended_glob = extglob;
  fflush(stderr);
  stderr = real;
  return r == 0;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The next command, checked: read from the input the loop started with, its tag right; `clean`:
   it holds no NUL byte (the agent refuses those: one here runs nothing). */
static char *next_command(char *nonce, int *clean) {
  char head[HEAD], expect[2 * TAG + 1];
  struct stat st;
  pending();
  if (syscall(SYS_fstat, input_fd, &st) != 0 || st.st_dev != input_dev || st.st_ino != input_ino)
    give_up("the shell's input was closed or replaced");
  if (read_input(head, HEAD) != 0)
    exit_shell(last_command_exit_value);
  size_t size = 0;
  for (int i = NONCE; i < NONCE + LENGTH; i++) {
    if (head[i] < '0' || head[i] > '9')
      give_up("the shell's input is not the agent's");
    size = size * 10 + (size_t)(head[i] - '0');
  }
  char *command = size <= COMMAND_MAX ? malloc(NONCE + LENGTH + size + 1) : NULL;
  if (command == NULL || read_input(command + NONCE + LENGTH, size) != 0)
    give_up("the shell's input ended mid-command");
  memcpy(command, head, NONCE + LENGTH);
  tag(command, NONCE + LENGTH + size, expect);
  if (memcmp(expect, head + NONCE + LENGTH, 2 * TAG) != 0)
    give_up("a command came with a wrong tag");
  memcpy(nonce, head, NONCE);
  nonce[NONCE] = '\0';
  memmove(command, command + NONCE + LENGTH, size);
  command[size] = '\0';
  *clean = memchr(command, '\0', size) == NULL;
  return command;
}

/* Between commands the shell keeps to the agent's CPU (`__ss_loop ... CPU ALLOWED`): a command
   handed over and its record handed back then wake no halted CPU. A command runs on every CPU the
   shell was allowed, and so does all it starts, `exec`'d programs included. */
#define CPU_WORDS 16 /* 1,024 CPUs */
static unsigned long allowed_cpus[CPU_WORDS], own_cpu[CPU_WORDS];
static int pinned;

static void set_cpu(unsigned long *mask, long cpu) {
  if (cpu >= 0 && cpu < CPU_WORDS * 8 * (long)sizeof(long))
    mask[cpu / (8 * sizeof(long))] |= 1UL << (cpu % (8 * sizeof(long)));
}

static void keep_to(const unsigned long *mask) {
  if (pinned)
    syscall(SYS_sched_setaffinity, 0, CPU_WORDS * sizeof(long), mask);
}

static void pin(const char *cpu, const char *allowed) {
  if (cpu == NULL || allowed == NULL || atol(cpu) < 0)
    return;
  for (const char *at = allowed; *at; at = strchr(at, ',') ? strchr(at, ',') + 1 : at + strlen(at))
    set_cpu(allowed_cpus, atol(at));
  set_cpu(own_cpu, atol(cpu));
  pinned = 1;
  keep_to(own_cpu);
}

static int loop_builtin(WORD_LIST *list) {
  WORD_LIST *w = list;
  char *args[8];
  for (int i = 0; i < 8; i++, w = w ? w->next : NULL)
    args[i] = w ? w->word->word : NULL;
  if (running || !args[5]) {
    builtin_error(running ? "the loop runs already" : "usage: __ss_loop STATUS_FD ERROR_FD STATE_DIR SAVED SETUP READY_FD [CPU ALLOWED]");
    return 2;
  }
  int ready_fd = atoi(args[5]);
  running = 1;
  pin(args[6], args[7]);
  status_fd = atoi(args[0]), error_fd = atoi(args[1]), saves = atol(args[3]);
  state_dir = strdup(args[2]);
  char *setup = strdup(args[4]), hexkey[2 * sizeof key];
  /* The agent's channels reach no program the model starts; its input leaves fd 0 for /dev/null. */
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  input_fd = fcntl(0, F_DUPFD_CLOEXEC, OWN_FDS);
  null_fd = null < 0 ? -1 : fcntl(null, F_DUPFD_CLOEXEC, OWN_FDS);
  close(null);
  fcntl(status_fd, F_SETFD, FD_CLOEXEC);
  fcntl(error_fd, F_SETFD, FD_CLOEXEC);
  if ((error_file = fdopen(error_fd, "w")) != NULL)
    setvbuf(error_file, NULL, _IONBF, 0);
  struct stat st;
  if (input_fd < 0 || null_fd < 0 || syscall(SYS_fstat, input_fd, &st) != 0)
    give_up("the command loop cannot take its input");
  input_dev = st.st_dev, input_ino = st.st_ino;
  if (read_full(input_fd, hexkey, sizeof hexkey) != 0)
    exit_shell(2);
  for (size_t i = 0; i < sizeof key; i++) {
    int hi = hexval(hexkey[2 * i]), lo = hexval(hexkey[2 * i + 1]);
    if (hi < 0 || lo < 0)
      give_up("the shell's key is not the agent's");
    key[i] = (uint8_t)(hi << 4 | lo);
  }
  dup2(null_fd, 0);
  parse_and_execute(setup, "sandshell", SEVAL_NOHIST);
  /* Through the setup, the saved state read back: a shell that ends before this byte died there
     (the agent then starts a fresh one: so would every next shell that read it back). */
  if (write(ready_fd, ".", 1) < 0) { /* (the agent reads no byte: a fresh shell next time) */
  }
  close(ready_fd);
  arm(SIGTERM, "\n" END " exit 143"); /* TERM (`kill $$`) ends the command line too, until the model sets its own */
  rearm();
  save_state(0); /* what the state scripts hold already (or what a new shell starts with) */
  for (int last = 0;;) {
    int clean;
    char nonce[NONCE + 1], digits[32], *command = next_command(nonce, &clean);
    keep_to(allowed_cpus);
    const char *how = "ran";
    read_but_dont_execute = 0; /* a `set -n` lasts to the end of the command that set it */
    if (!clean || !parses(command)) {
      how = "syntax", last = 2;
    } else {
      if (dup2(null_fd, 0) < 0) /* the model closed it: stdin is then what it left on fd 0 */
        close(0);
      last_command_exit_value = last;
      last = parse_and_execute(command, "eval", SEVAL_NOHIST | SEVAL_NOFREE | SEVAL_RESETLINE);
      unlink_fifo_list();
    }
    free(command);
    read_but_dont_execute = 0;
    last_command_exit_value = last;
    const char *cwd = get_string_value("PWD");
    snprintf(digits, sizeof digits, "%d", last);
    const char *fields[] = {digits, cwd && strlen(cwd) <= CWD_MAX ? cwd : "", how};
    record(nonce, fields, 3);
    keep_to(own_cpu);
    if (pinned)
      sched_yield(); /* the agent, waiting on this CPU, has the record before the save below */
    rearm();
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
  if (enable != NULL && enable->function != enable_guard)
    real_enable = enable->function, enable->function = enable_guard;
  return 1;
}

static char *loop_doc[] = {"The sandshell agent's command loop.", NULL};
static char *end_doc[] = {"What the sandshell agent's traps run: save the state (and exit).", NULL};

struct builtin __ss_loop_struct = {
    "__ss_loop", loop_builtin, BUILTIN_ENABLED, loop_doc, "__ss_loop STATUS_FD ERROR_FD STATE_DIR SAVED SETUP READY_FD [CPU ALLOWED]", 0,
};
struct builtin __ss_end_struct = {END, end_builtin, BUILTIN_ENABLED, end_doc, END " [exit N]", 0};
