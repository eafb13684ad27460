//! Raw AF_PACKET sockets with mmap'd TPACKET_V3 rings (next).
