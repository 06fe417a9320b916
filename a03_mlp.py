"""Section 5 of "PyTorch in One Hour": implementing multilayer neural networks (+ Exercise A.3).

The NeuralNetwork class itself lives in common/__init__.py, because sections 7 to 9 use it too.

Run: python a03_mlp.py
"""

import torch

from common import NeuralNetwork, flags, runner


def section_5_architecture() -> None:
    runner.heading("5 Implementing multilayer neural networks: the model")
    model = NeuralNetwork(50, 3)
    print(model)

    num_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("Total number of trainable model parameters:", num_params)

    # Not seeded yet: these random initial weights differ on every run
    print("model.layers[0].weight:\n", model.layers[0].weight, sep="")
    print("model.layers[0].weight.shape:", model.layers[0].weight.shape)


# EXTRA: Exercise A.3, which the book asks in section 7 (A.7): here, beside section 5's count
def section_5_exercise_a3() -> None:
    runner.heading("5 Exercise A.3: parameters of NeuralNetwork(2, 2)")
    model = NeuralNetwork(2, 2)
    # 2*30+30 + 30*20+20 + 20*2+2 = 752
    num_params = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print("NeuralNetwork(2, 2) trainable parameters:", num_params)


def section_5_seeded_forward() -> None:
    runner.heading("5 Seeded weights and a forward pass")
    torch.manual_seed(123)  # the same random initial weights every run
    model = NeuralNetwork(50, 3)
    print("model.layers[0].weight:\n", model.layers[0].weight, sep="")

    torch.manual_seed(123)
    X = torch.rand((1, 50))
    out = model(X)
    print("model(X):", out)

    with torch.no_grad():  # inference only: no graph to build
        out = model(X)
    print("model(X) under torch.no_grad():", out)

    with torch.no_grad():
        out = torch.softmax(model(X), dim=1)
    print("torch.softmax(model(X), dim=1):", out)


def main() -> None:
    section_5_architecture()
    section_5_exercise_a3()
    section_5_seeded_forward()


if __name__ == "__main__":
    flags.Parser(__doc__).parse_args()  # EXTRA: --help
    runner.run(main)
