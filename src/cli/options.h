// The command line's options, built from the option table (tfckpt/options.h): each row of
// a command becomes its CLI11 option, with the row's names, value name, help, group,
// relations and check, and records what it is given in an OptionValues, which fills the
// request (FillRequest). --help and the completions (completion.cc) come from the same rows.
#pragma once

#include <span>

#include <CLI/CLI.hpp>

#include "tfckpt/options.h"

namespace tfckpt::cli {

// Adds the rows of `table` for the subcommand `sub` (by its name) to it; the values given
// go into *values.
// REQUIRES: *values and `table` outlive the parse.
void AddTableOptions(CLI::App* sub, std::span<const OptionSpec> table, OptionValues* values);

}  // namespace tfckpt::cli
