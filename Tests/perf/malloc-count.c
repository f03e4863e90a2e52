// An LD_PRELOAD shim that counts malloc, calloc and realloc calls, for allocations per request (a figure
// that, unlike CPU time, does not move with the machine's load). On SIGUSR2 the process writes its count
// so far to /tmp/skillbus-mallocs.PID. Not part of the product.
//
//   gcc -O2 -shared -fPIC -o malloc-count.so malloc-count.c -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static atomic_ulong calls;
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);

// dlsym itself may calloc before real_calloc is known: serve that from a small static buffer, which free and
// realloc must then recognise (glibc aborts on a pointer it did not hand out).
static char bootstrap[4096];
static size_t bootstrap_used;

static int from_bootstrap(const void *pointer) {
    return (const char *)pointer >= bootstrap && (const char *)pointer < bootstrap + sizeof bootstrap;
}

static void write_count(int signal) {
    (void)signal;
    char path[64], text[32];
    snprintf(path, sizeof path, "/tmp/skillbus-mallocs.%d", (int)getpid());
    int length = snprintf(text, sizeof text, "%lu\n", atomic_load(&calls));
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) { (void)!write(fd, text, (size_t)length); close(fd); }
}

__attribute__((constructor)) static void install(void) {
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_free = dlsym(RTLD_NEXT, "free");
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = write_count;
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &action, NULL);
}

void *malloc(size_t size) {
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    if (!real_malloc) real_malloc = dlsym(RTLD_NEXT, "malloc");
    return real_malloc(size);
}

void *calloc(size_t count, size_t size) {
    if (!real_calloc) {
        size_t bytes = (count * size + 15) & ~(size_t)15;
        if (bootstrap_used + bytes > sizeof bootstrap) return NULL;
        void *memory = bootstrap + bootstrap_used;
        bootstrap_used += bytes;
        return memory;
    }
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    return real_calloc(count, size);
}

void *realloc(void *pointer, size_t size) {
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    if (!real_realloc) real_realloc = dlsym(RTLD_NEXT, "realloc");
    if (from_bootstrap(pointer)) {
        // Its size is unknown: copy what can be there, up to the buffer's end.
        void *moved = malloc(size);
        size_t room = (size_t)(bootstrap + sizeof bootstrap - (char *)pointer);
        if (moved) memcpy(moved, pointer, size < room ? size : room);
        return moved;
    }
    return real_realloc(pointer, size);
}

void free(void *pointer) {
    if (from_bootstrap(pointer)) return;
    if (!real_free) real_free = dlsym(RTLD_NEXT, "free");
    real_free(pointer);
}
