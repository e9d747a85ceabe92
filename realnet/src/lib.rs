//! gregor-realnet: binds gregor-core to real disks and sockets.
