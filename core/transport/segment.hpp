// segment.hpp — named POSIX shared memory (/dev/shm/NAME) that the ranks of a run map: the
// shared-memory transport's segment (shm.hpp) and the symmetric windows (symmetric.hpp).
//
// The first rank makes it with every page reserved (tmpfs otherwise hands pages out on first
// touch, and a full /dev/shm would end the run with SIGBUS in the middle of a message); each
// rank maps it, checking its size; the first unlinks the name once all have mapped it.
#pragma once

#include <cstddef>
#include <string>

namespace distlab {

// Makes NAME ("/distlab-...") with `bytes` reserved, not mapped. Throws Error ("could not make
// /dev/shm/NAME (64.0 MiB): No space left on device"), leaving no name behind.
void make_segment(const std::string& name, std::size_t bytes);
// Maps NAME, which must hold exactly `bytes`: the mapping, or nullptr with *why set.
void* map_segment(const std::string& name, std::size_t bytes, std::string* why);
void unmap_segment(void* base, std::size_t bytes);

// True once process `pid` of this host has ended (a zombie has: its parent has not reaped it).
bool process_ended(int pid);
// Segments named distlab-win-PID-* or distlab-mpi-PID-* whose process PID has ended: a run
// killed between making one and unlinking it. The next run's first rank removes them.
void remove_stale_segments();

}  // namespace distlab
