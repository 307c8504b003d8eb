// Each subcommand registers itself on the CLI11 app and runs when selected.
#pragma once

#include <functional>

#include <span>

#include <CLI/CLI.hpp>

#include "tfckpt/options.h"

namespace tfckpt::cli {

// Adds the subcommand to `app`, its options the rows of `table` for it (tfckpt/options.h);
// the returned function runs it and gives the exit code.
std::function<int()> AddInspect(CLI::App& app, std::span<const OptionSpec> table);
std::function<int()> AddValidate(CLI::App& app, std::span<const OptionSpec> table);
std::function<int()> AddReshard(CLI::App& app, std::span<const OptionSpec> table);
std::function<int()> AddMerge(CLI::App& app, std::span<const OptionSpec> table);
std::function<int()> AddConvert(CLI::App& app, std::span<const OptionSpec> table);
// Registers last: it describes every subcommand added before it.
std::function<int()> AddCompletion(CLI::App& app, std::span<const OptionSpec> table);

}  // namespace tfckpt::cli
