#pragma once
// A test hook: the reliability tests (test/reliability/) make one rank fail on purpose at an exact
// point of the training loop, which no outside signal can hit reliably. Inert unless the
// environment variable BMT_TRAIN_FAULT is set:
//
//   BMT_TRAIN_FAULT=<fault>:<step>[:<rank>]      (rank defaults to 0; steps count from 1, as logged)
//
//   kill-step         SIGKILL after the backward of step <step>, before its optimizer update
//   kill-save-begun   SIGKILL in the save of step <step>, once its temporary directory exists
//   kill-save-model   SIGKILL in the save of step <step>, after model.safetensors, before the optimizer
//   kill-save-files   SIGKILL in the save of step <step>, with every file written, before the commit
//   disk-full         in the save of step <step>, once its temporary directory exists, that rank's
//                     file size limit (RLIMIT_FSIZE) drops to 4 KiB, so its writes fail as on a full
//                     disk (SIGXFSZ is ignored, so the write returns an error instead)
//   disk-full-metrics the same before rank <rank>'s metrics record of step <step>: the record that
//                     crosses 4 KiB of the file is cut off there, and later ones fail whole
//   disk-full-plot    the same, at 256 bytes, before the loss curve is drawn after step <step> (the
//                     last step): every picture is larger
//   disk-full-timeline the same, at 256 bytes, before rank <rank> writes its --timeline trace after
//                     step <step> (the last step): every trace is larger
//   disk-full-export  the same, at 4 KiB, before the --export-hf files are written after step <step>
//                     (the last step)
//   nan-loss          the loss of step <step> on that rank is multiplied by NaN (so are its gradients)
//   inf-loss          the same with +infinity
#include <cstdint>
#include <string>

namespace bmt_train {

class FaultInjection {
 public:
  enum class Point { none, after_backward, save_begun, save_model_written, save_files_written, metrics_record, plot,
                     timeline, export_hf };

  // Reads BMT_TRAIN_FAULT; throws bmt::Error for a value it cannot read.
  static FaultInjection from_environment();
  static FaultInjection parse(const std::string& spec);

  bool active() const { return kind_ != Kind::none; }
  // Raises SIGKILL in this process if the fault is a kill at `point` of step `step` on this rank;
  // lowers the file size limit if it is a full disk there.
  void at(Point point, std::int64_t step) const;
  // The factor the loss of `step` is multiplied by on this rank: NaN or infinity when a non-finite
  // loss is to be injected there, 1 otherwise.
  float loss_factor(std::int64_t step) const;

 private:
  enum class Kind { none, kill, disk_full, nan_loss, inf_loss };
  bool here(std::int64_t step) const;
  Kind kind_ = Kind::none;
  Point point_ = Point::none;
  std::int64_t file_size_limit_ = 0;  // disk_full: bytes
  std::int64_t step_ = 0;
  int rank_ = 0;
};

}  // namespace bmt_train
