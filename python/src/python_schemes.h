// Shards that Python opens: the reference's gopen opens every URL through
// its table of handlers, `gopen_schemes`, after rewriting it by
// GOPEN_REWRITE; users register their own schemes there (an object store's
// client, a Hugging Face or AIStore reader) or replace a handler. The
// native opener (opener.h) does the same where it matters:
//
//   - GOPEN_REWRITE, when set, rewrites each URL before it is opened
//     (webdataset_cpp.gopen.rewrite_url); the samples keep the URL as listed;
//   - a URL whose scheme webdataset_cpp.gopen.gopen_schemes hands to Python
//     (a scheme the native reader does not read, or a native one whose
//     handler was replaced; the table tells the module at each change) is
//     opened by that handler, and the file object it returns is read here.
//
// Everything else is read natively, with no Python call.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "wds/io/byte_stream.h"

namespace wdspy {

namespace py = pybind11;

// RewrittenUrl is `url` after GOPEN_REWRITE's rules when the variable is set
// (through Python, with the GIL), else `url` itself (no Python call).
// Errors: rewrite_url's exception (refused under enforce_security, say),
// kept for Python (StorePythonError); PythonIsExiting.
[[nodiscard]] absl::StatusOr<std::string> RewrittenUrl(std::string_view url);
// PythonRewrites says whether RewrittenUrl calls Python (GOPEN_REWRITE is set).
bool PythonRewrites();

// OpenThroughPython opens `opened` (`url` after rewriting) with
// gopen_schemes[scheme] (else its "__default__"), called as gopen calls it,
// (url, "rb", 8192), and reads the file object it returns: by readinto
// where it has one, else by read, the GIL taken for each call. Finish closes
// it, which checks what its close checks (a pipe's exit status). The stream's
// url() is `url`. Errors: a FileNotFoundError or PermissionError of the
// handler is NotFound or PermissionDenied naming `url` (FileNotFoundError /
// PermissionError in Python; a sidecar so answered is absent); any other
// exception of the handler, of a read or of close, with the URL appended to
// its args as the reference's url_opener appends it, is kept for Python
// (StorePythonError); PythonIsExiting.
[[nodiscard]] absl::StatusOr<std::unique_ptr<wds::ByteStream>> OpenThroughPython(
    std::string url, const std::string& opened, const std::string& scheme);

}  // namespace wdspy
