// Rows, votes and agreement across ranks (dist/sharding.h).
#include "tensorgrad/dist/sharding.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tensorgrad/core/error.h"

namespace tensorgrad::dist {

void Shard::check() const {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw ValueError("the shard must have 0 <= rank < ranks; got rank " + std::to_string(rank) + " of " +
                     std::to_string(ranks));
}

void any_rank(Communicator& comm, std::span<bool> flags) {
  double votes[8];
  if (flags.size() > std::size(votes))
    throw ValueError("any_rank: at most " + std::to_string(std::size(votes)) + " flags a vote; got " +
                     std::to_string(flags.size()));
  for (size_t i = 0; i < flags.size(); ++i) votes[i] = flags[i] ? 1.0 : 0.0;
  comm.reduce_broadcast(std::span<double>(votes, flags.size()));
  for (size_t i = 0; i < flags.size(); ++i) flags[i] = votes[i] > 0.0;
}

std::string broadcast_string(Communicator& comm, std::string text) {
  int64_t size = int64_t(text.size());
  comm.broadcast_bytes(std::as_writable_bytes(std::span<int64_t>(&size, 1)), 0);
  text.resize(size_t(size));
  comm.broadcast_bytes(std::as_writable_bytes(std::span<char>(text.data(), text.size())), 0);
  return text;
}

void check_ranks_agree(dist::Communicator& comm, const std::vector<std::pair<std::string, std::string>>& settings,
                       const std::string& what, const std::string& advice) {
  std::string text;
  for (const auto& [name, value] : settings) text += name + ": " + value + "\n";
  auto split = [](const std::string& lines) {
    std::vector<std::string> out;
    std::istringstream in(lines);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const std::vector<std::string> mine = split(text), root = split(broadcast_string(comm, text));
  std::string difference;
  for (size_t i = 0; i < std::max(mine.size(), root.size()) && difference.empty(); ++i) {
    if (i >= mine.size()) difference = "rank 0 has " + root[i] + " after this rank's last entry";
    else if (i >= root.size()) difference = "this rank has " + mine[i] + " after rank 0's last entry";
    else if (mine[i] != root[i]) difference = "'" + mine[i] + "' here, '" + root[i] + "' on rank 0";
  }
  double differing = difference.empty() ? 0.0 : 1.0;
  comm.reduce_broadcast(std::span<double>(&differing, 1));
  if (differing > 0.0)
    throw ValueError("data-parallel training: the ranks' " + what + " differ (" + std::to_string(int(differing)) +
                     " of " + std::to_string(comm.size()) + " ranks differ from rank 0)" +
                     (difference.empty() ? std::string(". See the other ranks' messages")
                                         : "; on rank " + std::to_string(comm.rank()) + ": " + difference) +
                     ". " + advice);
}

void abort_job(const dist::Communicator& comm, const std::string& where, const std::exception& error) {
  std::fprintf(stderr, "tensorgrad rank %d of %d: %s: %s\ntensorgrad rank %d: ending the job (MPI_Abort 1) so that "
                       "no rank waits for this one in a collective\n",
               comm.rank(), comm.size(), where.c_str(), error.what(), comm.rank());
  std::fflush(stderr);
  comm.abort(1);
}

}  // namespace tensorgrad::dist
