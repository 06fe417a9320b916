"""The published code our FIXED lines correct, built as ../shared/TUTORIAL_SPEC.md describes it
statement by statement, for test_lesson.py's proofs: section 9.3's ddp_setup and the rank its
__main__ reads, and the GPU guide's four models, unchanged. Nothing here is the companion's: a
proof runs this, asserts its failure (or its wrong result), and runs the same assertion on the
companion's line as its control."""

import os
import platform

import torch
import torch.nn as nn
from torch.distributed import init_process_group
from torch.nn import Transformer


# Section 9.3
def ddp_setup(rank, world_size):
    if "MASTER_ADDR" not in os.environ:
        os.environ["MASTER_ADDR"] = "localhost"
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = "12345"
    if platform.system() == "Windows":
        os.environ["USE_LIBUV"] = "0"
        init_process_group(backend="gloo", rank=rank, world_size=world_size)
    else:
        init_process_group(backend="nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def rank_in_main():
    """The rank as the text's ``if __name__ == "__main__":`` block reads it."""
    if "LOCAL_RANK" in os.environ:
        rank = int(os.environ["LOCAL_RANK"])
    elif "RANK" in os.environ:
        rank = int(os.environ["RANK"])
    else:
        rank = 0
    return rank


# The GPU guide's four architectures
class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, kernel_size=3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        out = self.pool1(self.relu1(self.conv1(x)))
        out = self.pool2(self.relu2(self.conv2(out)))
        out = out.view(out.size(0), -1)
        out = self.relu3(self.fc1(out))
        return self.fc2(out)


class RNNClassifier(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.rnn = nn.RNN(embedding_dim, hidden_dim)
        self.fc = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        embedded = self.embedding(x)
        _, hidden = self.rnn(embedded)
        return self.fc(hidden.squeeze(0))


class LSTMGenerator(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_layers):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_dim, vocab_size)

    def forward(self, x, h0, c0):
        embedded = self.embedding(x)
        output, (hn, cn) = self.lstm(embedded, (h0, c0))
        output = self.fc(output[:, -1, :])
        return output, (hn, cn)


class TransformerLM(nn.Module):
    def __init__(self, vocab_size, d_model, nhead, num_layers, seq_len):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, seq_len)  # noqa: F821 (the article's)
        self.transformer = Transformer(d_model=d_model, nhead=nhead,
                                       num_encoder_layers=num_layers,
                                       num_decoder_layers=num_layers)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, src, tgt):
        src = self.embedding(src) + self.pos_encoding(src)
        tgt = self.embedding(tgt) + self.pos_encoding(tgt)
        output = self.transformer(src, tgt)
        output = self.fc(output)
        return output
