// libcurl for the openai planner's HTTP client, loaded at run time with dlopen rather than linked, so that the
// skillbus binary starts on a host without libcurl. The C file takes libcurl's types and option numbers from
// curl/curl.h at build time; this header does not include it, so Swift sees only what is declared here.
#ifndef CCURL_RUNTIME_H
#define CCURL_RUNTIME_H

#include <stdbool.h>
#include <stddef.h>

/// Bytes libcurl received (one header line with its CRLF, or a piece of the body). Returning false stops
/// the transfer.
typedef bool (*ccurl_bytes_callback)(void *context, const char *bytes, size_t length);
/// Asked about once a second while the transfer runs, and more often while data flows: true stops it.
typedef bool (*ccurl_stop_callback)(void *context);

/// One request. Every pointer must stay valid until `ccurl_perform` returns.
typedef struct ccurl_request {
    const char *url;
    /// NULL for the method the body implies: POST with a body, GET without.
    const char *method;
    /// "Name: value" lines; "Name:" removes a header libcurl would send.
    const char *const *headers;
    size_t header_count;
    /// NULL for no body.
    const void *body;
    size_t body_length;
    /// 0 for libcurl's default.
    long connect_timeout_ms;
    void *context;
    ccurl_bytes_callback on_header;
    ccurl_bytes_callback on_body;
    ccurl_stop_callback should_stop;
} ccurl_request;

/// Code of `ccurl_perform` when no libcurl was loaded or it gave no handle (libcurl's own codes are >= 0).
#define CCURL_NOT_LOADED (-1)
/// libcurl's codes that the caller tells apart (the C file checks each against curl.h).
#define CCURL_E_OK 0
#define CCURL_E_WRITE_ERROR 23
#define CCURL_E_OPERATION_TIMEDOUT 28
#define CCURL_E_ABORTED_BY_CALLBACK 42

/// Loads libcurl from `library` (a name for dlopen, e.g. "libcurl.so.4"), resolves its functions and runs
/// curl_global_init. Returns 0, or -1 with the reason in `error` (dlerror's words, or the missing function).
/// Thread-safe; the first library loaded stays in use for the process's life, later calls only check that
/// `library` opens and has those functions.
int ccurl_load(const char *library, char *error, size_t error_size);

/// Runs `request` to its end on the calling thread, calling its callbacks as data arrives. Returns libcurl's
/// code (CCURL_E_OK when the whole response arrived) and, when it is not CCURL_E_OK, libcurl's words for it
/// in `message`.
int ccurl_perform(const ccurl_request *request, char *message, size_t message_size);

#endif
