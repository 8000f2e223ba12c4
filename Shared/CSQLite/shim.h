#include <sqlite3.h>

/// sqlite3_config is variadic, which Swift cannot call.
static inline int tracker_sqlite3_config_memstatus(int on) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, on);
}
