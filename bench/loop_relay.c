/* What an agent in C would cost, for bench/hop_bench.py: the least a process can do between the
   attach stream and sandshell's own command loop (bashloop.c, loaded into bash as the agent loads
   it). Each line on stdin is a `run` frame; its id and command are taken out (no escapes: the
   bench's commands have none), sent to the loop with a nonce and a tag under the loop's key, the
   status record read back, the cwd checked against the kernel's, and an exit frame of the agent's
   size written on stdout; then, as the agent does before the next command, the loop's word that
   its state is saved is awaited. Left out: the frame's JSON parser and every check of it, the
   records' credentials and tag check, the watchdogs (processes, OOM score, disk), output pipes,
   timeouts and kill phases. Built statically (the image's libc may be older than the host's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../container/sandshell_agent/blake2s.h"

#define LOOP "/opt/sandshell/sandshell_agent/bashloop.so"
#define STATE "/tmp/loop-relay-state"

static const char *field(const char *line, const char *name, size_t *len) {
  const char *at = strstr(line, name);
  if (at == NULL)
    return NULL;
  at += strlen(name);
  const char *end = strchr(at, '"');
  *len = end ? (size_t)(end - at) : 0;
  return end ? at : NULL;
}

/* Read the status socket until `buf` holds a record of `fields` fields after `nonce` and its tag. */
static int await_record(int fd, char *buf, size_t cap, size_t *have, const char *nonce, int fields) {
  for (;;) {
    int nuls = 0;
    for (size_t i = 0; i < *have; i++)
      if (buf[i] == '\0' && ++nuls == fields + 2) {
        if (memcmp(buf, nonce, 32) != 0)
          return -1;
        return (int)(i + 1);
      }
    ssize_t r = read(fd, buf + *have, cap - *have);
    if (r <= 0)
      return -1;
    *have += (size_t)r;
  }
}

int main(void) {
  int ctl[2], st[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, ctl) || socketpair(AF_UNIX, SOCK_STREAM, 0, st) ||
      socketpair(AF_UNIX, SOCK_STREAM, 0, ready))
    return 1;
  mkdir(STATE, 0700);
  pid_t bash = fork();
  if (bash == 0) {
    dup2(ctl[1], 0);
    dup2(st[1], 200);
    dup2(2, 201);
    dup2(ready[1], 202);
    execl("/bin/bash", "bash", "--noprofile", "--norc", (char *)0);
    _exit(127);
  }
  close(ctl[1]), close(st[1]), close(ready[1]);
  FILE *urandom = fopen("/dev/urandom", "r");
  char hexkey[65];
  if (urandom == NULL || fread(key, 1, sizeof key, urandom) != sizeof key)
    return 1;
  for (size_t i = 0; i < sizeof key; i++)
    sprintf(hexkey + 2 * i, "%02x", key[i]);
  dprintf(ctl[0], "builtin enable -f " LOOP " __ss_loop __ss_end || builtin exit 3\n"
                  "__ss_loop 200 201 " STATE " 0 'builtin cd -- /' 202; builtin exit 3\n%s", hexkey);
  static char in[65536], line[70000], status[8192], cwd[4096], proc[64];
  size_t have = 0, got = 0;
  unsigned long count = 0;
  snprintf(proc, sizeof proc, "/proc/%d/cwd", (int)bash);
  for (;;) {
    ssize_t r = read(0, in + have, sizeof in - have - 1);
    if (r <= 0)
      return 0;
    have += (size_t)r;
    char *nl;
    while ((nl = memchr(in, '\n', have)) != NULL) {
      *nl = '\0';
      size_t id_len, cmd_len;
      const char *id = field(in, "\"id\":\"", &id_len), *cmd = field(in, "\"command\":\"", &cmd_len);
      if (id == NULL || cmd == NULL || cmd_len > 60000)
        return 2;
      char nonce[33], head[43], mac[33];
      snprintf(nonce, sizeof nonce, "%032lx", ++count);
      snprintf(head, sizeof head, "%s%010zu", nonce, cmd_len);
      memcpy(line, head, 42); /* the tag covers the head and the command */
      memcpy(line + 42, cmd, cmd_len);
      tag(line, 42 + cmd_len, mac);
      memcpy(line + 42, mac, 32);
      memcpy(line + 74, cmd, cmd_len);
      if (write(ctl[0], line, 74 + cmd_len) < 0)
        return 1;
      int end = await_record(st[0], status, sizeof status, &got, nonce, 3);
      if (end < 0)
        return 3;
      int code = atoi(status + 33);
      ssize_t cl = readlink(proc, cwd, sizeof cwd - 1);
      cwd[cl > 0 ? cl : 0] = '\0';
      int n = snprintf(line, sizeof line,
                   "{\"type\":\"exit\",\"id\":\"%.*s\",\"exit_code\":%d,\"cwd\":\"%s\",\"user\":\"root\","
                   "\"host\":\"sandbox\",\"timed_out\":false,\"interrupted\":false,\"signal\":null,"
                   "\"duration\":0.0004,\"output_bytes\":0,\"truncated\":false,\"spilled\":null,"
                   "\"restarted\":false,\"syntax_error\":false,\"notice\":null,\"error\":null}\n",
                   (int)id_len, id, code, cwd);
      if (write(1, line, (size_t)n) != n)
        return 1;
      memmove(status, status + end, got - (size_t)end);
      got -= (size_t)end;
      if (await_record(st[0], status, sizeof status, &got, nonce, 1) < 0) /* its state saved */
        return 4;
      got = 0;
      size_t used = (size_t)(nl - in) + 1;
      memmove(in, nl + 1, have - used);
      have -= used;
    }
  }
}
