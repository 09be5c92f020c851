// Where each rank runs, kept in the rendezvous store at startup, so that a rank that loses a connection while it
// trains can say whose it was. Gloo's error names only the peer's address ("Read error [198.18.0.2]:6292:
// Connection reset by peer"); matched to the ranks published at that address, the message a user reads names the
// lost node and its ranks:
//
//   trainer::publish_whereabouts(*store, topology.rank);   // once, at startup
//   ...
//   catch (const std::exception& e) {
//     throw std::runtime_error(trainer::name_lost_peers(*store, topology, trainer::error_message(e)));
//   }
#pragma once

#include <string>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "parallel.h"

namespace trainer {

// This host's name (gethostname).
std::string host_name();

// Writes "lens/where/<rank>": this host's name and its IPv4/IPv6 addresses other than loopback.
void publish_whereabouts(c10d::Store& store, int rank);

// `error` with, before it, the ranks and host of every peer address it names ("lost the connection to ranks 2, 3
// on node1 (198.18.0.2): ..."); `error` unchanged when it names no address. A rank that fails says so in the store
// first, and is never named as lost: a survivor that lost only peers which failed before it (their exit broke its
// connections) waits up to 5 s for the first one's verdict and says the same. When the store cannot be read (it
// went with the lost node: rank 0's, or the launcher agent's), says that instead of the ranks.
std::string name_lost_peers(c10d::Store& store, const Topology& topology, const std::string& error);

}  // namespace trainer
