// trident-train: train GPT-2 with Megatron-compatible flags.
#include <iostream>

#include "kernels/backends.h"
#include "tool_main.h"
#include "train/trainer.h"

int main(int argc, char** argv) {
  return trident::run_tool("trident-train", [&] {
    trident::TrainOptions opt;
    if (!trident::parse_train_options(argc, argv, opt)) return 0;
    auto data = trident::make_train_data(opt);
    auto backend = trident::make_backend(opt.device);
    trident::Trainer trainer(opt, *backend, std::move(data), std::cout);
    trainer.train();
    return 0;
  });
}
