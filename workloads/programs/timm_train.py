"""A timm model trained with the standard mixed-precision loop from timm's and
PyTorch's documentation: `timm.create_model`, `timm.optim.create_optimizer_v2`,
`torch.autocast(float16)` with a `GradScaler`, a `timm.loss` criterion, synthetic
ImageNet-shaped batches already on the GPU (as timm's benchmark.py does), random weights.

    python workloads/programs/timm_train.py [--model resnet50] [--batch-size 64]
        [--channels-last] [--amp-dtype bfloat16] [--no-amp] [--compile [--compile-mode MODE]]
        [--steps 50]
"""

import argparse

import timm
import timm.loss
import timm.optim
import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="resnet50")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--amp-dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--no-amp", action="store_true")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--compile-mode", default=None, help="torch.compile's mode (e.g. reduce-overhead: CUDA graphs)")
    args = p.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = timm.create_model(args.model, pretrained=False, num_classes=1000).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = timm.optim.create_optimizer_v2(model, opt="sgd", lr=0.1, momentum=0.9, weight_decay=1e-4)
    criterion = timm.loss.LabelSmoothingCrossEntropy(smoothing=0.1)
    amp_dtype = torch.float16 if args.amp_dtype == "float16" else torch.bfloat16
    use_amp = not args.no_amp
    scaler = torch.amp.GradScaler(device.type, enabled=use_amp and amp_dtype == torch.float16)
    step_fn = model
    if args.compile:
        step_fn = torch.compile(model, mode=args.compile_mode)
    x = torch.randn(args.batch_size, 3, args.img_size, args.img_size, device=device)
    if args.channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (args.batch_size,), device=device)
    model.train()
    for _ in range(args.steps):
        with torch.autocast(device.type, dtype=amp_dtype, enabled=use_amp):
            loss = criterion(step_fn(x), y)
        optimizer.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


if __name__ == "__main__":
    main()
