/* flood.c -- a stranger that floods a TCP port with silent connections:
 * the half-open, unauthenticated peers a hora listener must not let keep
 * the real daemons out. Built by tests/cli/lib.sh with cc.
 *
 *   flood PORT N SECONDS [TAG]
 *
 * opens N connections to 127.0.0.1:PORT (each connected before the next),
 * prints "ready N" on stdout once they are all up, then holds them open,
 * sending nothing, for SECONDS (or until killed). TAG is ignored: it marks
 * the process for the test's clean-up. Exits 1 when it cannot connect. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: flood PORT N SECONDS [TAG]\n");
    return 2;
  }
  int port = atoi(argv[1]), n = atoi(argv[2]), secs = atoi(argv[3]);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  for (int i = 0; i < n; i++) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
      perror("flood: connect");
      return 1;
    }
    /* kept open, silent; closed at exit */
  }
  printf("ready %d\n", n);
  fflush(stdout);
  sleep((unsigned)secs);
  return 0;
}
