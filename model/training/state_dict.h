// A model's parameters as torch names them: fresh ones (initialize_parameters),
// or a state_dict read from and written to one <key>.npy per key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/modules/network.h"
#include "runtime/core.h"
#include "runtime/tensor.h"

namespace gnnrt::model {

// Puts freshly initialised parameters on the core (ParamDecl::Init; Philox
// keyed by (seed, parameter index): the same values on every machine).
void initialize_parameters(runtime::Core& core, const std::vector<ParamDecl>& params, uint64_t seed);
// The same for the parameters not on the core (a non-strict or scoped
// load): each drawn as its index in `params` draws it in a fresh start.
void initialize_missing_parameters(runtime::Core& core, const std::vector<ParamDecl>& params, uint64_t seed);

// --params-in, as torch's load_state_dict: strict, every key loaded or one
// error listing the missing keys, the unexpected keys and the mismatched
// shapes; non-strict loads the intersection and lists the rest (warning).
// An alias key is expected too, with its parameter's shape; the
// parameter's own key gives the values, and an alias holding other values
// is mismatched (torch saves one tensor under both names). A buffer's key
// is expected too and must hold the buffer's values (the program was built
// with them). A non-empty `scope` loads the keys under "<scope>." only
// (torch's model.<scope>.load_state_dict): the others are neither expected
// nor loaded, and a file outside the scope is unexpected.
void load_state_dict(runtime::Core& core, const std::vector<ParamDecl>& params,
                     const std::vector<ParamAlias>& aliases, const std::vector<Buffer>& buffers,
                     const std::filesystem::path& dir, bool strict, const std::string& scope = "");

// Refuses a parameter file's non-finite values (NaN, Inf; float64 beyond
// float32's range): std::invalid_argument "--params-in FILE: KEY[i, j] is
// nan", the first such value's position.
void check_finite_parameter(const Tensor& values, const std::string& key, const std::filesystem::path& file);

// --params-out: <key>.npy for every parameter, alias and buffer (each
// parameter read from the core once: a host sync).
void write_state_dict(runtime::Core& core, const std::vector<ParamDecl>& params,
                      const std::vector<ParamAlias>& aliases, const std::vector<Buffer>& buffers,
                      const std::filesystem::path& dir);

}  // namespace gnnrt::model
