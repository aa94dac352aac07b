// Colour on the terminal: whether gnnrt's log lines carry ANSI colour codes.
//
// `auto` colours a stream only when it is the user's terminal. Under mpirun
// a rank's stdout and stderr are pseudo-terminals Open MPI made to forward
// the output, whatever the user's own output is (a file, a pipe), so a
// rank in auto mode never colours; `--color always` (or GNNRT_COLOR=always,
// which gnnrt launch passes on to the ranks) asks for it. NO_COLOR
// (no-color.org) turns auto off.
#pragma once

#include <spdlog/common.h>

#include <memory>
#include <string>

namespace gnnrt::launch {

enum class ColorWhen { kAuto, kAlways, kNever };

// "auto" | "always" | "never"; throws std::invalid_argument naming the text.
ColorWhen parse_color(const std::string& text);

// The process's choice: --color, else $GNNRT_COLOR, else auto.
void set_color(ColorWhen when);
ColorWhen color();

// Whether this process is a rank started by mpirun (Open MPI's or PMIx's
// variables in the environment).
bool under_mpirun();

// Whether output to `fd` (1 or 2) gets colour under the process's choice.
bool colored(int fd);

// A console sink on stdout (fd 1) or stderr (fd 2), coloured as colored(fd).
spdlog::sink_ptr console_sink(int fd);

}  // namespace gnnrt::launch
