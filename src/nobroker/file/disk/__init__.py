"""Bytes and the operating system: file system calls, the queue lock, named locks,
and the pipes that wake idle workers and result waiters."""
