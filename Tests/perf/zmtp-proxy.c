// An experiment, not part of the product: the bench's raw baseline (a ROUTER frontend, a DEALER backend,
// messages passed through unchanged) written as one thread on epoll that speaks ZMTP 3.0 (NULL mechanism)
// itself, with no libzmq. It measures what the libzmq I/O thread's hop costs: the same work as
// `skillbus bench-baseline-proxy` (zmq_proxy), without the mailbox signalling between two threads.
// Frames are forwarded as their wire bytes; only the routing id frame is added (frontend to backend) or
// read and taken off (backend to frontend). Workers and clients are ordinary libzmq DEALERs.
//
//   gcc -O2 -o zmtp-proxy Tests/perf/zmtp-proxy.c && ./zmtp-proxy
//   (prints "skillbus baseline proxy ready: frontend=tcp://127.0.0.1:P backend=tcp://127.0.0.1:Q", as the
//   libzmq one does; cpu-per-request.sh runs it with PROXY=zmtp.)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

enum { FRONT, BACK };
enum { GREETING, HANDSHAKE, READY };

typedef struct {
    unsigned char *bytes;
    size_t used, size, start;
} buffer;

typedef struct connection {
    int fd, side, state, dirty, closed;
    uint32_t id;  // a frontend peer's routing id (its descriptor): 0x00 then these four bytes, big-endian
    buffer in, out;
    size_t message_start;  // where the message being read starts in `in`
    struct connection *next_dirty;
} connection;

#define MAX_CONNECTIONS 1024
static connection *connections[MAX_CONNECTIONS];  // by fd
static connection *backends[MAX_CONNECTIONS];
static int backend_count, next_backend;
static connection *dirty_list;
static int epoll_fd;

static void reserve(buffer *b, size_t more) {
    if (b->used + more <= b->size) return;
    if (b->start > 0) {
        memmove(b->bytes, b->bytes + b->start, b->used - b->start);
        b->used -= b->start;
        b->start = 0;
        if (b->used + more <= b->size) return;
    }
    size_t size = b->size ? b->size : 65536;
    while (size < b->used + more) size *= 2;
    b->bytes = realloc(b->bytes, size);
    b->size = size;
}

static void put(connection *c, const void *bytes, size_t count) {
    reserve(&c->out, count);
    memcpy(c->out.bytes + c->out.used, bytes, count);
    c->out.used += count;
    if (!c->dirty) {
        c->dirty = 1;
        c->next_dirty = dirty_list;
        dirty_list = c;
    }
}

static void put_greeting_and_ready(connection *c) {
    unsigned char greeting[64] = {0xFF, 0, 0, 0, 0, 0, 0, 0, 1, 0x7F, 3, 0};
    memcpy(greeting + 12, "NULL", 4);
    put(c, greeting, sizeof greeting);
    const char *type = c->side == FRONT ? "ROUTER" : "DEALER";
    unsigned char ready[64];
    size_t at = 0;
    ready[at++] = 0x04;  // a command, short
    at++;                // its size, below
    ready[at++] = 5;
    memcpy(ready + at, "READY", 5);
    at += 5;
    ready[at++] = 11;
    memcpy(ready + at, "Socket-Type", 11);
    at += 11;
    uint32_t length = htonl(6);
    memcpy(ready + at, &length, 4);
    at += 4;
    memcpy(ready + at, type, 6);
    at += 6;
    ready[1] = (unsigned char)(at - 2);
    put(c, ready, at);
}

static void drop(connection *c) {
    if (c->closed) return;
    c->closed = 1;
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    connections[c->fd] = NULL;
    if (c->side == BACK) {
        for (int i = 0; i < backend_count; i++)
            if (backends[i] == c) backends[i] = backends[--backend_count];
    }
    // Left allocated: a connection on the dirty list may still be looked at this round.
}

// One frame at `at` in c->in: its header length, body length and flags; 0 when not all of it is there.
static int frame_at(connection *c, size_t at, size_t *header, uint64_t *body, unsigned char *flags) {
    size_t available = c->in.used - at;
    if (available < 2) return 0;
    *flags = c->in.bytes[at];
    if (*flags & 0x02) {
        if (available < 9) return 0;
        uint64_t size = 0;
        for (int i = 0; i < 8; i++) size = size << 8 | c->in.bytes[at + 1 + i];
        *header = 9;
        *body = size;
    } else {
        *header = 2;
        *body = c->in.bytes[at + 1];
    }
    return available >= *header + *body;
}

// Whether the message could go; a client's message waits in its input while no worker is connected.
static int forward_message(connection *from, size_t start, size_t end) {
    if (from->side == FRONT) {
        if (backend_count == 0) return 0;
        connection *to = backends[next_backend++ % backend_count];
        unsigned char id_frame[7] = {0x01, 5, 0};
        uint32_t id = htonl(from->id);
        memcpy(id_frame + 3, &id, 4);
        put(to, id_frame, sizeof id_frame);
        put(to, from->in.bytes + start, end - start);
        return 1;
    } else {
        // The first frame is the routing id the frontend added.
        unsigned char *frame = from->in.bytes + start;
        if (end - start < 7 || frame[0] != 0x01 || frame[1] != 5) return 1;
        uint32_t id;
        memcpy(&id, frame + 3, 4);
        id = ntohl(id);
        connection *c = id < MAX_CONNECTIONS ? connections[id] : NULL;
        if (c && c->side == FRONT && c->id == id && c->state == READY) put(c, frame + 7, end - start - 7);
        return 1;
    }
}

static void process(connection *c);

static void process(connection *c) {
    if (c->state == READY && c->in.start == c->in.used) return;
    while (!c->closed) {
        size_t at = c->in.start;
        if (c->state == GREETING) {
            if (c->in.used - at < 64) return;
            c->in.start += 64;
            c->state = HANDSHAKE;
            continue;
        }
        size_t header;
        uint64_t body;
        unsigned char flags;
        if (c->state == HANDSHAKE) {
            if (!frame_at(c, at, &header, &body, &flags)) return;
            if (!(flags & 0x04)) return drop(c);
            c->in.start += header + body;  // the peer's READY: its properties do not matter here
            c->state = READY;
            if (c->side == BACK) {
                backends[backend_count++] = c;
                // Clients that wrote before any worker was there.
                for (int fd = 0; fd < MAX_CONNECTIONS; fd++)
                    if (connections[fd] && connections[fd]->side == FRONT) process(connections[fd]);
            }
            continue;
        }
        // A whole message: frames up to one without MORE.
        size_t end = at;
        for (;;) {
            if (!frame_at(c, end, &header, &body, &flags)) return;
            end += header + body;
            if (flags & 0x04) {  // a command between messages (PING...): skipped
                if (end - header - body == at) {
                    c->in.start = end;
                    break;
                }
                return drop(c);
            }
            if (!(flags & 0x01)) {
                if (!forward_message(c, at, end)) return;
                c->in.start = end;
                break;
            }
        }
    }
}

static void flush(connection *c) {
    c->dirty = 0;
    if (c->closed) return;
    while (c->out.start < c->out.used) {
        ssize_t n = write(c->fd, c->out.bytes + c->out.start, c->out.used - c->out.start);
        if (n > 0) {
            c->out.start += (size_t)n;
        } else if (n < 0 && errno == EAGAIN) {
            struct epoll_event event = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
            epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event);
            return;
        } else {
            return drop(c);
        }
    }
    c->out.start = c->out.used = 0;
}

static int listen_on(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t length = sizeof address;
    if (bind(fd, (struct sockaddr *)&address, sizeof address) || listen(fd, 128)) return -1;
    getsockname(fd, (struct sockaddr *)&address, &length);
    *port = ntohs(address.sin_port);
    return fd;
}

int main(void) {
    int front_port, back_port;
    int front = listen_on(&front_port), back = listen_on(&back_port);
    if (front < 0 || back < 0) return 1;
    epoll_fd = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN};
    event.data.u64 = 1;  // the frontend listener; 2 the backend one; connections are pointers
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, front, &event);
    event.data.u64 = 2;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, back, &event);
    printf("skillbus baseline proxy ready: frontend=tcp://127.0.0.1:%d backend=tcp://127.0.0.1:%d\n", front_port,
           back_port);
    fflush(stdout);
    struct epoll_event events[64];
    for (;;) {
        int ready = epoll_wait(epoll_fd, events, 64, -1);
        for (int i = 0; i < ready; i++) {
            if (events[i].data.u64 == 1 || events[i].data.u64 == 2) {
                int side = events[i].data.u64 == 1 ? FRONT : BACK;
                int fd;
                while ((fd = accept4(side == FRONT ? front : back, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (fd >= MAX_CONNECTIONS) {
                        close(fd);
                        continue;
                    }
                    int one = 1;
                    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    connection *c = calloc(1, sizeof *c);
                    c->fd = fd;
                    c->side = side;
                    c->id = (uint32_t)fd;
                    connections[fd] = c;
                    struct epoll_event added = {.events = EPOLLIN, .data.ptr = c};
                    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &added);
                    put_greeting_and_ready(c);
                }
                continue;
            }
            connection *c = events[i].data.ptr;
            if (c->closed) continue;
            if (events[i].events & EPOLLOUT) {
                struct epoll_event readable = {.events = EPOLLIN, .data.ptr = c};
                epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &readable);
                if (!c->dirty) {
                    c->dirty = 1;
                    c->next_dirty = dirty_list;
                    dirty_list = c;
                }
            }
            if (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                reserve(&c->in, 65536);
                ssize_t n = read(c->fd, c->in.bytes + c->in.used, c->in.size - c->in.used);
                if (n <= 0 && !(n < 0 && errno == EAGAIN)) {
                    drop(c);
                    continue;
                }
                if (n > 0) c->in.used += (size_t)n;
                process(c);
                if (c->in.start == c->in.used) c->in.start = c->in.used = 0;
            }
        }
        // Everything this round produced, one write per peer.
        while (dirty_list) {
            connection *c = dirty_list;
            dirty_list = c->next_dirty;
            flush(c);
        }
    }
}
