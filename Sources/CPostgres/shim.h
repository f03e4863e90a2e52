#ifndef SKILLBUS_CPOSTGRES_SHIM_H
#define SKILLBUS_CPOSTGRES_SHIM_H
/* libpq's synchronous API: the PostgreSQL round journal of a coordinator group (Journal/PostgresJournalStore). */
#include <libpq-fe.h>
#endif
