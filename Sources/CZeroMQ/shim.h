#ifndef SKILLBUS_CZEROMQ_SHIM_H
#define SKILLBUS_CZEROMQ_SHIM_H
#include <zmq.h>
#endif
