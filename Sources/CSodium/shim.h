#ifndef SKILLBUS_CSODIUM_SHIM_H
#define SKILLBUS_CSODIUM_SHIM_H
// libsodium (Debian's libsodium-dev): the boxes of the own ZMTP engine's CURVE mechanism.
#include <sodium.h>
#endif
