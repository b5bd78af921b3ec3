#include "core/process_id.h"

#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>

namespace trident {

std::string host_token() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string h;
  for (const char* c = host; *c && h.size() < 32; ++c)
    if (std::isalnum(static_cast<unsigned char>(*c))) h += *c;
  return h.empty() ? std::string("host") : h;
}

bool process_is_gone(pid_t pid) { return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH; }

}  // namespace trident
