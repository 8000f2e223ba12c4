#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <mosquitto.h>
#include <mqtt_protocol.h>

/* Names the calling thread (15 bytes at most), for ps and debuggers: Glibc's
   pthread_setname_np is declared only under _GNU_SOURCE, which Swift's Glibc
   module does not define. */
static inline int tracker_name_this_thread(const char *name) {
    return pthread_setname_np(pthread_self(), name);
}
