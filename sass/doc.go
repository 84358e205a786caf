// Package sass recovers the structure of NVIDIA GPU machine code (SASS) from
// the text that nvdisasm prints and from cubin ELF files.
//
// It is the layer below the collector's online analysis and the advisor: it
// knows functions, instructions and their operands, the line map with inlined
// call chains, control bits (stall counts and scoreboards), control-flow
// graphs, dominators, loop nests, def-use chains, the access kind (unit size,
// vector width, int or float) of every memory instruction, and the
// HPCToolkit-style structure tree (function -> inlined frames -> loops ->
// source lines -> instructions) used to place GPU PCs in a calling-context
// tree.
//
// The parser targets the Volta-and-later syntax (sm_70 to sm_120; the test
// data covers sm_80, sm_90, sm_100 and sm_120). Input is text from
//
//	nvdisasm -c -g -gi [-hex] file.cubin
//
// (-g or -gi add the line map, -hex adds the encodings from which the control
// bits are decoded). Whole-ELF output (without -c) is accepted too: only the
// executable sections are read.
//
// Nothing here panics on malformed input: parsers and decoders return a
// *SyntaxError or *FormatError naming the line or byte offset.
package sass
