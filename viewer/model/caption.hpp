// caption.hpp — a sentence for every step of a trace, from its data flow, and a text summary of
// what the panels show at a moment (`distlab-viewer --describe`). Plain C++ over TraceModel and
// a Moment (playback.hpp), no ImGui.
//
// The step a moment describes: on either clock, the step whose beat contains it (the messages
// of step k travel while the beat is in (k - 1, k], and at beat k they have just landed), so
// `--step 3` describes step 3. Its messages say, with no lesson-specific code:
//   pattern     who sends to whom: a ring (right or left), pairs (rank ^ mask), a star from or to
//               one rank, all to all, one message, else the list
//   payload     which chunks: a formula of the sender r ("chunk (r - 3) mod 4") or of the
//               receiver d ("chunk d"), one chunk, k of C chunks, the whole buffer
//   apply       copy ("stores") or reduce ("adds")
//   volume      bytes per link, and how many ranks' data a reduced message carries
//   collective  named when the messages say it: reduce-scatter, all-gather, all-reduce, reduce,
//               broadcast, scatter, gather, all-to-all; from the buffer's messages over the
//               whole trace where one step cannot tell (BufferRole below): a reduce up and a
//               broadcast down k trees, the pairwise all-to-all, Bruck's all-to-all
//   group       when the messages were sent in groups (Comm::split's names on them): "in each tp
//               group, ..." for one group, the groups' names after the flow for several
//   windows     a step's window accesses (schema 4: loads and stores on symmetric windows), which
//               are no messages: "no messages; r1 loads 4 KiB from r0's window", or after the
//               messages' sentence "; and through windows, ..."
// e.g. "step 3 of 6, reduce-scatter: every rank sends chunk (r - 3) mod 4 right and adds the one
// from its left; 1 KiB per link; each message holds 3 of 4 ranks' data".
//
// A lesson may add what the messages cannot say: the `text` phase arg of a compute span
// (comm.phase(name, {.text = "..."}); docs/trace-format.md). On the steps clock a step shows
// the texts of the phases around its messages, and of the phases with no message that follow
// them on the same rank (lesson 05's "3 compute gradients" after the pull); on the measured
// clock, the texts of the phases covering the moment. Training steps (train_steps.hpp) add
// "training step k of K".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "viewer/model/playback.hpp"
#include "viewer/model/trace_model.hpp"
#include "viewer/model/train_steps.hpp"

namespace distlab::viewer {

struct Caption {
  int beat = 0;   // the step described: 1 .. steps; 0 before the first (then `flow` is the next)
  int steps = 0;  // beats in the trace
  int step_id = -1;
  std::string collective;  // "reduce-scatter", "gather + reduce", ...; "" when the messages
                           // name none
  std::string flow;        // who sends what to whom, and the bytes
  int train_step = 0, train_steps = 0;  // 1-based training step and count; 0 when none
  std::vector<std::string> phase_texts;

  // "step 3 of 6, reduce-scatter: every rank sends ..." (no phase texts).
  std::string line() const;
  // The line without its "step 3 of 6" head: what the Topology panel shows under its own.
  std::string body() const;
};

// What caption_at needs beyond the model, built once per model: the messages of each beat, the
// spans that carry a phase text, and the training steps.
// What a buffer's messages, over the whole trace, say its collective is, where one step alone
// cannot tell:
//   reduce_roots     the ranks its reduced chunks end on (each chunk's most complete sum), when
//                    fewer than the ranks that send reductions: a reduce up that many trees
//                    (NCCL's double binary tree: two, half the data each), not a reduce-scatter,
//                    which leaves a part of the sum on every rank
//   broadcast_roots  likewise the ranks its copied chunks start from (each chunk's first
//                    copy), when fewer than the ranks that send them: a broadcast down that many
//                    trees, not an all-gather, whose chunks start on every rank
//   all_to_all       every copy carries its sender's own block r, every rank sends and
//                    receives, each sending to several ranks: the pairwise all-to-all's buffer (block r of the receiver's output is
//                    the block rank r sent it; core/collectives/all_to_all.hpp)
struct BufferRole {
  std::uint32_t buffer = 0;                   // string id
  int reduce_roots = 0, broadcast_roots = 0;  // 0: not fewer than the senders
  bool all_to_all = false;
};

struct CaptionIndex {
  std::vector<std::vector<std::uint32_t>> messages_of_beat;  // [beat]: messages, beat 1 .. steps
  std::vector<std::vector<std::uint32_t>> accesses_of_beat;  // [beat]: window accesses
  std::vector<std::uint32_t> text_spans;                     // by start
  std::vector<std::vector<std::uint32_t>> texts_of_beat;     // [beat]: text spans shown with it
  std::vector<std::uint32_t> reduced_buffers;  // string ids some message reduces into, sorted
  std::vector<BufferRole> roles;               // by buffer string id
  TrainSteps training;
  // A real run's steps are its collectives (pytorch_trace.hpp): each one's sentence
  // (real_run.hpp: call_caption), by beat - 1.
  std::vector<std::string> call_flows;
};
CaptionIndex index_captions(const TraceModel& model);

Caption caption_at(const TraceModel& model, const CaptionIndex& index, const Moment& at);
Caption caption_at(const TraceModel& model, const Moment& at);  // builds the index

// The step of a moment that a caption describes (see above): 0 .. number of steps.
int caption_beat(const TraceModel& model, const Moment& at);

// `distlab-viewer --describe`: the caption and phase texts, then what the panels show: the
// messages in flight (src -> dst, bytes, chunk, how far), each buffer's chunks per rank and how
// complete they are, each rank's memory when the trace has a ledger, and how much of each
// rank's communication so far ran under its compute (overlap.hpp), and for a pipeline what each
// stage runs and holds (schedule.hpp: describe_schedule). Several lines, each ending in '\n'.
std::string describe(const TraceModel& model, const Moment& at);

}  // namespace distlab::viewer
