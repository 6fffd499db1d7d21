// `tenure agent` flags for ACLs, TLS and limits against abuse (agent_flags.cpp),
// kept apart from main.cpp's run_agent so that each concern stays small.
#pragma once

#include <tenure/agent.hpp>

#include <boost/program_options/options_description.hpp>
#include <boost/program_options/variables_map.hpp>

#include <iosfwd>

namespace tenure::cli {

void add_agent_security_flags(boost::program_options::options_description& desc);
// Fills `opts` from the parsed flags; throws usage_error for a bad value.
void apply_agent_security_flags(boost::program_options::variables_map const& vm, tenure::agent_options& opts);
// The usage lines of these flags.
void agent_security_help(std::ostream& os);

}  // namespace tenure::cli
