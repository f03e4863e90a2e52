#include "CCurlRuntime.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <curl/curl.h>

// libcurl's types, option numbers and codes come from its header (Debian's libcurl4-openssl-dev, at build
// time); its functions come from the library dlopen finds at run time, through these pointers.
typedef struct {
    CURLcode (*global_init)(long flags);
    CURL *(*easy_init)(void);
    CURLcode (*easy_setopt)(CURL *easy, CURLoption option, ...);
    CURLcode (*easy_perform)(CURL *easy);
    void (*easy_cleanup)(CURL *easy);
    const char *(*easy_strerror)(CURLcode code);
    struct curl_slist *(*slist_append)(struct curl_slist *list, const char *line);
    void (*slist_free_all)(struct curl_slist *list);
} functions_t;

// The codes the Swift side tells apart (CCurlRuntime.h, which Swift reads without curl.h) are libcurl's own.
_Static_assert(CCURL_E_OK == CURLE_OK, "CCURL_E_OK");
_Static_assert(CCURL_E_WRITE_ERROR == CURLE_WRITE_ERROR, "CCURL_E_WRITE_ERROR");
_Static_assert(CCURL_E_OPERATION_TIMEDOUT == CURLE_OPERATION_TIMEDOUT, "CCURL_E_OPERATION_TIMEDOUT");
_Static_assert(CCURL_E_ABORTED_BY_CALLBACK == CURLE_ABORTED_BY_CALLBACK, "CCURL_E_ABORTED_BY_CALLBACK");

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
    CURLcode code = is_loaded ? CURLE_OK : found.global_init(CURL_GLOBAL_DEFAULT);
    bool keep = !is_loaded && code == CURLE_OK;
    if (keep) {
        loaded = found;
        is_loaded = true;
    }
    pthread_mutex_unlock(&lock);
    if (code != CURLE_OK) snprintf(error, error_size, "curl_global_init failed: %s", found.easy_strerror(code));
    // The library in use stays open for the process's life; another one only had to be a libcurl.
    if (!keep) dlclose(handle);
    return code == CURLE_OK ? 0 : -1;
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

static int on_progress(void *user, curl_off_t down_total, curl_off_t down_now, curl_off_t up_total,
                       curl_off_t up_now) {
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
    CURL *easy = curl.easy_init();
    if (easy == NULL) {
        snprintf(message, message_size, "curl_easy_init gave no handle");
        return CURLE_FAILED_INIT;
    }
    char detail[CURL_ERROR_SIZE] = "";
    CURLcode code = CURLE_OK;
    struct curl_slist *headers = NULL;
    for (size_t index = 0; index < request->header_count && code == CURLE_OK; index++) {
        struct curl_slist *longer = curl.slist_append(headers, request->headers[index]);
        if (longer == NULL) code = CURLE_OUT_OF_MEMORY;
        headers = longer != NULL ? longer : headers;
    }
    // Each option in turn until one is refused (setopt is variadic: every value has the type its option takes).
#define SET(option, value) \
    if (code == CURLE_OK) code = curl.easy_setopt(easy, option, value)
    SET(CURLOPT_ERRORBUFFER, detail);
    SET(CURLOPT_URL, request->url);
    SET(CURLOPT_NOSIGNAL, 1L); // no SIGALRM for timeouts: many threads run transfers
    SET(CURLOPT_FOLLOWLOCATION, 1L);
    SET(CURLOPT_MAXREDIRS, 10L);
    SET(CURLOPT_ACCEPT_ENCODING, ""); // every encoding this libcurl can decode
    SET(CURLOPT_SUPPRESS_CONNECT_HEADERS, 1L);
    if (request->connect_timeout_ms > 0) SET(CURLOPT_CONNECTTIMEOUT_MS, request->connect_timeout_ms);
    if (request->body != NULL) {
        SET(CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)request->body_length);
        SET(CURLOPT_POSTFIELDS, request->body);
    }
    if (!method_is_implied(request)) SET(CURLOPT_CUSTOMREQUEST, request->method);
    SET(CURLOPT_HTTPHEADER, headers);
    SET(CURLOPT_HEADERFUNCTION, on_header);
    SET(CURLOPT_HEADERDATA, (void *)request);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, (void *)request);
    SET(CURLOPT_XFERINFOFUNCTION, on_progress);
    SET(CURLOPT_XFERINFODATA, (void *)request);
    SET(CURLOPT_NOPROGRESS, 0L);
#undef SET
    if (code == CURLE_OK) code = curl.easy_perform(easy);
    if (code != CURLE_OK) snprintf(message, message_size, "%s", detail[0] != 0 ? detail : curl.easy_strerror(code));
    curl.easy_cleanup(easy);
    curl.slist_free_all(headers);
    return code;
}
