// io/io_limits.hpp: the most bytes one read or write call of the io layer hands to HDF5.
//
// Layer: io. Why a limit: parallel HDF5 1.10 (Debian 12) passes each H5Dwrite/H5Dread of an
// MPI-IO file to MPI_File_write_at/read_at as one call with an `int` byte count, and fails
// above 2^31 - 1 bytes ("can't convert from size to size_i"); ROMIO and many MPI libraries have
// the same int limit. So every transfer of the io layer (checkpoint shards and tables, token
// files, array files) is split into hyperslabs of at most io_max_call_bytes() bytes each,
// whatever the dataset's size; element counts and offsets are 64-bit throughout.
//
// The limit is 1 GiB unless the environment variable TRIDENT_IO_MAX_CALL_BYTES gives another
// number of bytes (read once, at the first transfer); tests lower it to a few KiB so that the
// split path runs on small files (tests/mpi/test_io_limits.cpp, tests/cli/test_cli_io_limits.sh).
// Invariant: every call of the io layer's transfer helpers moves at most io_max_call_bytes()
// bytes (a single element larger than the limit is the only exception).
#pragma once

#include <cstddef>
#include <cstdint>

namespace trident {

/// Default of io_max_call_bytes(): 1 GiB, half the int limit of MPI-IO byte counts.
constexpr std::size_t kDefaultIoMaxCallBytes = std::size_t{1} << 30;

/// The most bytes one H5Dread/H5Dwrite call of the io layer transfers. Local, thread-safe. Reads
/// TRIDENT_IO_MAX_CALL_BYTES on first use; throws IoError naming the variable when it is not a
/// positive integer.
std::size_t io_max_call_bytes();

/// Sets io_max_call_bytes() (>= 1) for this process, e.g. to a few KiB in a test. Local, thread-safe.
void set_io_max_call_bytes(std::size_t bytes);

/// Number of H5Dread/H5Dwrite calls the io layer's transfer helpers made in this process so far
/// (tests check that a lowered limit splits a transfer). Local, thread-safe.
std::uint64_t io_transfer_calls();

}  // namespace trident
