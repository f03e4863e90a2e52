#ifndef SKILLBUS_CSQLITE_SHIM_H
#define SKILLBUS_CSQLITE_SHIM_H
#include <sqlite3.h>

/* SQLITE_TRANSIENT is a cast macro Swift cannot import: it tells SQLite to copy a bound text or blob. */
static inline sqlite3_destructor_type skillbus_sqlite_transient(void) { return SQLITE_TRANSIENT; }
#endif
