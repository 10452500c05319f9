/* mh_relay.c -- a man in the middle of one TCP connection (multi-host
 * tests: service.sh).
 *
 *   mh_relay LISTEN-PORT TARGET-HOST TARGET-PORT FLIP-AT
 *
 * Accepts one connection on LISTEN-PORT (every address), connects to
 * TARGET-HOST:TARGET-PORT and relays bytes both ways until either side
 * closes, except that the byte at offset FLIP-AT of the target's stream
 * (what the target sends back) gets its lowest bit flipped. Prints
 * "listening" once it listens, and at the end "flipped" or "not reached"
 * (the stream was shorter). Exit status 0, or 2 on a usage or set-up
 * error. */
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int write_all(int fd, const unsigned char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: mh_relay LISTEN-PORT TARGET-HOST TARGET-PORT "
                    "FLIP-AT\n");
    return 2;
  }
  long flip_at = atol(argv[4]);
  int l = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0;
  setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                            .sin6_port = htons((uint16_t)atoi(argv[1])),
                            .sin6_addr = IN6ADDR_ANY_INIT};
  if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) < 0 ||
      listen(l, 1) < 0) {
    perror("mh_relay: listen");
    return 2;
  }
  printf("listening\n");
  fflush(stdout);
  int a = accept(l, NULL, NULL);
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_socktype = SOCK_STREAM;
  int b = -1;
  if (a >= 0 && getaddrinfo(argv[2], argv[3], &hints, &res) == 0) {
    b = socket(res->ai_family, SOCK_STREAM, 0);
    if (b >= 0 && connect(b, res->ai_addr, res->ai_addrlen) < 0) {
      close(b);
      b = -1;
    }
    freeaddrinfo(res);
  }
  if (b < 0) {
    fprintf(stderr, "mh_relay: cannot reach %s:%s\n", argv[2], argv[3]);
    return 2;
  }
  long back = 0; /* bytes of the target's stream so far */
  int flipped = 0;
  unsigned char buf[65536];
  struct pollfd pf[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
  for (;;) {
    if (poll(pf, 2, 60000) <= 0) break;
    if (pf[0].revents) {
      ssize_t k = read(a, buf, sizeof buf);
      if (k <= 0 || write_all(b, buf, (size_t)k) < 0) break;
    }
    if (pf[1].revents) {
      ssize_t k = read(b, buf, sizeof buf);
      if (k <= 0) break;
      if (!flipped && flip_at >= back && flip_at < back + k) {
        buf[flip_at - back] ^= 1;
        flipped = 1;
      }
      back += k;
      if (write_all(a, buf, (size_t)k) < 0) break;
    }
  }
  close(a);
  close(b);
  printf("%s\n", flipped ? "flipped" : "not reached");
  return 0;
}
