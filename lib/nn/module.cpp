#include "bmtrain/nn/module.hpp"

#include "bmtrain/runtime/error.hpp"

namespace bmt {

namespace {
void check_name(const std::string& name, const char* what) {
  BMT_REQUIRE(!name.empty() && name.find('.') == std::string::npos,
              what << ": expected a non-empty name without '.', found '" << name << "'");
}
}  // namespace

void Module::register_parameter(const std::string& name, const Tensor& parameter) {
  check_name(name, "register_parameter");
  BMT_REQUIRE(is_parameter(parameter), "register_parameter('" << name << "'): expected a DistributedParameter, "
                                                               "found a plain tensor");
  for (const auto& [n, p] : parameters_)
    BMT_REQUIRE(n != name, "register_parameter: expected a new name, found '" << name << "' registered twice");
  parameters_.emplace_back(name, parameter);
}

void Module::register_module(const std::string& name, Module& module) {
  check_name(name, "register_module");
  BMT_REQUIRE(&module != this, "register_module('" << name << "'): a module cannot contain itself");
  for (const auto& [n, m] : children_)
    BMT_REQUIRE(n != name, "register_module: expected a new name, found '" << name << "' registered twice");
  children_.emplace_back(name, &module);
  module.parent_ = this;
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [n, p] : parameters_) out.emplace_back(prefix + n, p);
  for (const auto& [n, m] : children_) {
    auto sub = m->named_parameters(prefix + n + ".");
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (const auto& [n, m] : children_) {
    auto sub = m->named_modules(prefix.empty() ? n : prefix + "." + n);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::zero_grad() {
  for (auto& [n, p] : named_parameters()) p.impl()->grad.reset();
}

}  // namespace bmt
