#ifndef SKILLBUS_CLINUX_SHIM_H
#define SKILLBUS_CLINUX_SHIM_H
/* What Swift's Glibc module lacks or cannot reach on Linux. */
#include <stdio.h>
/* The own ZMTP engine (ZMTPRouter, ZMTPDealer, TCPSocket) speaks ZMTP on its own sockets: epoll, and TCP_NODELAY. */
#include <sys/epoll.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

/* Swift 6 refuses to touch C's global `stdout`; this makes it line-buffered from C instead,
   so that output into pipes (skillbus up, feeds read by scripts) is live. */
static inline void skillbus_line_buffer_stdout(void) { setvbuf(stdout, NULL, _IOLBF, 0); }
#endif
