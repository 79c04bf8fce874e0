/* The floor of an agent hop, for bench/hop_bench.py: the least a process between the attach stream
   and bash can do. Each line on stdin is a command for a child bash; bash writes its status line
   to fd 3; the relay answers with a JSON exit frame on stdout. No framing, tag, nonce, cwd check,
   watchdog or state save: what sandshell's agent and loop add is measured against this. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(void) {
  int ctl[2], st[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, ctl) != 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, st) != 0)
    return 1;
  if (fork() == 0) {
    close(ctl[0]);
    close(st[0]);
    dup2(ctl[1], 0);
    if (st[1] != 3) {
      dup2(st[1], 3);
      close(st[1]);
    }
    execl("/bin/bash", "bash", "--noprofile", "--norc", (char *)0);
    _exit(127);
  }
  close(ctl[1]);
  close(st[1]);
  static char in[65536], out[4096], line[65600];
  size_t have = 0;
  for (;;) {
    ssize_t r = read(0, in + have, sizeof in - have);
    if (r <= 0)
      return 0;
    have += (size_t)r;
    char *nl;
    while ((nl = memchr(in, '\n', have)) != NULL) {
      size_t len = (size_t)(nl - in);
      int n = snprintf(line, sizeof line, "%.*s\nprintf 'S %%d %%s\\n' $? \"$PWD\" >&3\n", (int)len, in);
      if (write(ctl[0], line, (size_t)n) != n)
        return 1;
      memmove(in, nl + 1, have - len - 1);
      have -= len + 1;
      ssize_t got = read(st[0], out, sizeof out - 1);
      if (got <= 0)
        return 1;
      out[got] = 0;
      n = snprintf(line, sizeof line, "{\"type\":\"exit\",\"id\":\"c\",\"exit_code\":%d}\n", atoi(out + 2));
      if (write(1, line, (size_t)n) != n)
        return 1;
    }
  }
}
