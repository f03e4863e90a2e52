#include "CCurlRuntime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

// The part of libcurl's ABI used here, written from its documentation (libcurl-easy(3), curl_easy_setopt(3)):
// option numbers are a type base (long 0, pointer 10000, function 20000, curl_off_t 30000) plus an index.
typedef struct ccurl_easy ccurl_easy;   // CURL
typedef struct ccurl_slist ccurl_slist; // struct curl_slist, only ever passed back to libcurl
typedef int64_t ccurl_off_t;            // curl_off_t on 64-bit Linux

enum {
    OPT_WRITEDATA = 10001,
    OPT_URL = 10002,
    OPT_ERRORBUFFER = 10010,
    OPT_WRITEFUNCTION = 20011,
    OPT_POSTFIELDS = 10015,
    OPT_HTTPHEADER = 10023,
    OPT_HEADERDATA = 10029,
    OPT_CUSTOMREQUEST = 10036,
    OPT_NOPROGRESS = 43,
    OPT_FOLLOWLOCATION = 52,
    OPT_XFERINFODATA = 10057,
    OPT_MAXREDIRS = 68,
    OPT_HEADERFUNCTION = 20079,
    OPT_NOSIGNAL = 99,
    OPT_ACCEPT_ENCODING = 10102,
    OPT_POSTFIELDSIZE_LARGE = 30120,
    OPT_CONNECTTIMEOUT_MS = 156,
    OPT_XFERINFOFUNCTION = 20219,
    OPT_SUPPRESS_CONNECT_HEADERS = 265,
};

enum {
    GLOBAL_DEFAULT = 3, // CURL_GLOBAL_SSL | CURL_GLOBAL_WIN32
    ERROR_SIZE = 256,   // CURL_ERROR_SIZE
    E_FAILED_INIT = 2,
    E_OUT_OF_MEMORY = 27,
};

typedef struct {
    int (*global_init)(long flags);
    ccurl_easy *(*easy_init)(void);
    int (*easy_setopt)(ccurl_easy *easy, int option, ...);
    int (*easy_perform)(ccurl_easy *easy);
    void (*easy_cleanup)(ccurl_easy *easy);
    const char *(*easy_strerror)(int code);
    ccurl_slist *(*slist_append)(ccurl_slist *list, const char *line);
    void (*slist_free_all)(ccurl_slist *list);
} functions_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static functions_t loaded; // under `lock`
static bool is_loaded;     // under `lock`

static bool resolve(void *handle, const char *name, void **slot, char *error, size_t error_size) {
    *slot = dlsym(handle, name);
    if (*slot == NULL) snprintf(error, error_size, "it has no function %s", name);
    return *slot != NULL;
}

int ccurl_load(const char *library, char *error, size_t error_size) {
    void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *why = dlerror();
        snprintf(error, error_size, "%s", why != NULL ? why : "dlopen failed");
        return -1;
    }
    functions_t found;
    bool complete = resolve(handle, "curl_global_init", (void **)&found.global_init, error, error_size)
        && resolve(handle, "curl_easy_init", (void **)&found.easy_init, error, error_size)
        && resolve(handle, "curl_easy_setopt", (void **)&found.easy_setopt, error, error_size)
        && resolve(handle, "curl_easy_perform", (void **)&found.easy_perform, error, error_size)
        && resolve(handle, "curl_easy_cleanup", (void **)&found.easy_cleanup, error, error_size)
        && resolve(handle, "curl_easy_strerror", (void **)&found.easy_strerror, error, error_size)
        && resolve(handle, "curl_slist_append", (void **)&found.slist_append, error, error_size)
        && resolve(handle, "curl_slist_free_all", (void **)&found.slist_free_all, error, error_size);
    if (!complete) {
        dlclose(handle);
        return -1;
    }
    pthread_mutex_lock(&lock);
    int code = is_loaded ? 0 : found.global_init(GLOBAL_DEFAULT);
    bool keep = !is_loaded && code == 0;
    if (keep) {
        loaded = found;
        is_loaded = true;
    }
    pthread_mutex_unlock(&lock);
    if (code != 0) snprintf(error, error_size, "curl_global_init failed: %s", found.easy_strerror(code));
    // The library in use stays open for the process's life; another one only had to be a libcurl.
    if (!keep) dlclose(handle);
    return code == 0 ? 0 : -1;
}

static size_t on_header(char *bytes, size_t size, size_t count, void *user) {
    const ccurl_request *request = user;
    return request->on_header(request->context, bytes, size * count) ? size * count : 0;
}

static size_t on_body(char *bytes, size_t size, size_t count, void *user) {
    const ccurl_request *request = user;
    // Any count other than the one given makes libcurl stop with CURLE_WRITE_ERROR.
    return request->on_body(request->context, bytes, size * count) ? size * count : (size * count == 0 ? 1 : 0);
}

static int on_progress(void *user, ccurl_off_t down_total, ccurl_off_t down_now, ccurl_off_t up_total,
                       ccurl_off_t up_now) {
    (void)down_total, (void)down_now, (void)up_total, (void)up_now;
    const ccurl_request *request = user;
    return request->should_stop(request->context) ? 1 : 0;
}

static bool method_is_implied(const ccurl_request *request) {
    if (request->method == NULL) return true;
    return strcmp(request->method, request->body != NULL ? "POST" : "GET") == 0;
}

int ccurl_perform(const ccurl_request *request, char *message, size_t message_size) {
    pthread_mutex_lock(&lock);
    bool ready = is_loaded;
    functions_t curl = loaded;
    pthread_mutex_unlock(&lock);
    if (!ready) {
        snprintf(message, message_size, "libcurl is not loaded");
        return CCURL_NOT_LOADED;
    }
    ccurl_easy *easy = curl.easy_init();
    if (easy == NULL) {
        snprintf(message, message_size, "curl_easy_init gave no handle");
        return E_FAILED_INIT;
    }
    char detail[ERROR_SIZE] = "";
    int code = CCURL_E_OK;
    ccurl_slist *headers = NULL;
    for (size_t index = 0; index < request->header_count && code == CCURL_E_OK; index++) {
        ccurl_slist *longer = curl.slist_append(headers, request->headers[index]);
        if (longer == NULL) code = E_OUT_OF_MEMORY;
        headers = longer != NULL ? longer : headers;
    }
    // Each option in turn until one is refused (setopt is variadic: every value has the type its option takes).
#define SET(option, value) \
    if (code == CCURL_E_OK) code = curl.easy_setopt(easy, option, value)
    SET(OPT_ERRORBUFFER, detail);
    SET(OPT_URL, request->url);
    SET(OPT_NOSIGNAL, 1L); // no SIGALRM for timeouts: many threads run transfers
    SET(OPT_FOLLOWLOCATION, 1L);
    SET(OPT_MAXREDIRS, 10L);
    SET(OPT_ACCEPT_ENCODING, ""); // every encoding this libcurl can decode
    SET(OPT_SUPPRESS_CONNECT_HEADERS, 1L);
    if (request->connect_timeout_ms > 0) SET(OPT_CONNECTTIMEOUT_MS, request->connect_timeout_ms);
    if (request->body != NULL) {
        SET(OPT_POSTFIELDSIZE_LARGE, (ccurl_off_t)request->body_length);
        SET(OPT_POSTFIELDS, request->body);
    }
    if (!method_is_implied(request)) SET(OPT_CUSTOMREQUEST, request->method);
    SET(OPT_HTTPHEADER, headers);
    SET(OPT_HEADERFUNCTION, on_header);
    SET(OPT_HEADERDATA, (void *)request);
    SET(OPT_WRITEFUNCTION, on_body);
    SET(OPT_WRITEDATA, (void *)request);
    SET(OPT_XFERINFOFUNCTION, on_progress);
    SET(OPT_XFERINFODATA, (void *)request);
    SET(OPT_NOPROGRESS, 0L);
#undef SET
    if (code == CCURL_E_OK) code = curl.easy_perform(easy);
    if (code != CCURL_E_OK) snprintf(message, message_size, "%s", detail[0] != 0 ? detail : curl.easy_strerror(code));
    curl.easy_cleanup(easy);
    curl.slist_free_all(headers);
    return code;
}
