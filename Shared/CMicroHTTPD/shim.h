// libmicrohttpd for Swift: the header, and C wrappers for its variadic
// calls (Swift cannot call a C function with `...`).
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

// A daemon with one thread per connection (a handler may wait on the broker
// without holding up anyone else), its limits, and a completion callback.
// NULL when `bind_ipv4` is no IPv4 address or the daemon cannot start.
static inline struct MHD_Daemon *tracker_mhd_start(const char *bind_ipv4, uint16_t port, MHD_AccessHandlerCallback handler, void *handler_cls,
                                                   MHD_RequestCompletedCallback completed, void *completed_cls,
                                                   unsigned int connection_limit, unsigned int per_ip_limit,
                                                   unsigned int timeout_sec, size_t memory_limit) {
    struct sockaddr_in address;
    memset(&address, 0, sizeof(address));
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    if (inet_pton(AF_INET, bind_ipv4, &address.sin_addr) != 1) return NULL;
    return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
                            port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, timeout_sec,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory_limit,
                            MHD_OPTION_END);
}

// The port the daemon listens on (the one the kernel chose for port 0).
static inline uint16_t tracker_mhd_port(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_BIND_PORT);
    return info == NULL ? 0 : info->port;
}

// The client's address as text ("127.0.0.1", "::1"); "" when unknown.
static inline void tracker_mhd_client_address(struct MHD_Connection *connection, char *buffer, size_t size) {
    buffer[0] = 0;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (info == NULL || info->client_addr == NULL) return;
    const struct sockaddr *address = info->client_addr;
    if (address->sa_family == AF_INET) {
        inet_ntop(AF_INET, &((const struct sockaddr_in *)address)->sin_addr, buffer, (socklen_t)size);
    } else if (address->sa_family == AF_INET6) {
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)address)->sin6_addr, buffer, (socklen_t)size);
    }
}

// The enum values Swift needs, under names the importer leaves alone.
static const enum MHD_Result tracker_mhd_yes = MHD_YES;
static const enum MHD_Result tracker_mhd_no = MHD_NO;
static const enum MHD_ValueKind tracker_mhd_header_kind = MHD_HEADER_KIND;
static const enum MHD_ValueKind tracker_mhd_argument_kind = MHD_GET_ARGUMENT_KIND;
static const enum MHD_ResponseMemoryMode tracker_mhd_must_copy = MHD_RESPMEM_MUST_COPY;
