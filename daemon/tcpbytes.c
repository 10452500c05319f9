/* tcpbytes.c -- the kernel's byte counts of a TCP connection (metrics.c).
 * On its own: the kernel's struct tcp_info, which has them, cannot be
 * declared beside the C library's, which libuv's headers bring. */
#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

int hd_tcp_bytes(int fd, uint64_t *acked, uint64_t *received);

int hd_tcp_bytes(int fd, uint64_t *acked, uint64_t *received) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) < 0 ||
      len < offsetof(struct tcp_info, tcpi_bytes_received) + 8)
    return -1;
  *acked = ti.tcpi_bytes_acked;
  *received = ti.tcpi_bytes_received;
  return 0;
}
