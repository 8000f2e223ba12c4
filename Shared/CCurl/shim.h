// libcurl's easy interface. curl_easy_setopt and curl_easy_getinfo are
// variadic, which Swift cannot call: one typed wrapper for each kind of
// argument.
#include <curl/curl.h>

typedef size_t (*tracker_curl_data_callback)(char *, size_t, size_t, void *);
typedef int (*tracker_curl_progress_callback)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

static inline CURLcode tracker_curl_set_long(CURL *curl, CURLoption option, long value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tracker_curl_set_offset(CURL *curl, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tracker_curl_set_pointer(CURL *curl, CURLoption option, const void *value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tracker_curl_set_data_callback(CURL *curl, CURLoption option, tracker_curl_data_callback value) {
    return curl_easy_setopt(curl, option, value);
}
static inline CURLcode tracker_curl_set_progress_callback(CURL *curl, tracker_curl_progress_callback value) {
    return curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, value);
}
static inline CURLcode tracker_curl_response_code(CURL *curl, long *code) {
    return curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, code);
}
