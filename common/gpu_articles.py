"""The models of the two GPU articles that came with the tutorial (a short GPU how-to and a
longer GPU guide), written as the articles write them, with what was broken as published fixed;
each fix says FIXED and why. a07 runs them with --gpu-guides."""

import math

import torch
import torch.nn as nn


class LinearRegression(nn.Module):
    """The how-to's DataParallel example: one linear layer."""

    def __init__(self, input_size, output_size):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)

    def forward(self, x):
        return self.linear(x)


class ConvNet(nn.Module):
    """The guide's image classifier: two convolution blocks, then two linear layers."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            # FIXED: the first linear layer expects 64 x 7 x 7 inputs, which only 28 x 28
            # images give; pooling to 7 x 7 makes any image size fit (no new parameters) on
            # CPUs and CUDA. Apple's MPS pools only where 7 divides the size reached here
            # (images of 28, 56, ... 224 pixels; pytorch/pytorch#96056)
            nn.AdaptiveAvgPool2d((7, 7)),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, 128),
            nn.ReLU(),
            nn.Linear(128, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))


class RNNClassifier(nn.Module):
    """The guide's sequence classifier: embedding, RNN, a linear layer on the last state."""

    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        # FIXED: nn.RNN reads (sequence, batch) by default; the data is (batch, sequence)
        self.rnn = nn.RNN(embedding_dim, hidden_dim, batch_first=True)
        self.fc = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        embedded = self.embedding(x)
        _, hidden = self.rnn(embedded)  # hidden: (1, batch, hidden_dim)
        return self.fc(hidden[-1])


class LSTMGenerator(nn.Module):
    """The guide's text generator: embedding, LSTM, a linear layer on the last step."""

    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_layers):
        super().__init__()
        self.num_layers = num_layers
        self.hidden_dim = hidden_dim
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_dim, vocab_size)

    def init_states(self, batch_size, device):
        # FIXED: the article's forward needs h0 and c0 but never builds them
        shape = (self.num_layers, batch_size, self.hidden_dim)
        return torch.zeros(shape, device=device), torch.zeros(shape, device=device)

    def forward(self, x):
        h0, c0 = self.init_states(x.shape[0], x.device)
        out, _ = self.lstm(self.embedding(x), (h0, c0))
        return self.fc(out[:, -1, :])  # the next token's logits


class PositionalEncoding(nn.Module):
    """FIXED: used by the article but never defined. The sinusoidal encoding of "Attention Is
    All You Need", added to the embeddings (batch, sequence, d_model)."""

    def __init__(self, d_model, max_len=512):
        super().__init__()
        position = torch.arange(max_len).unsqueeze(1)
        scale = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        encoding = torch.zeros(max_len, d_model)
        encoding[:, 0::2] = torch.sin(position * scale)
        encoding[:, 1::2] = torch.cos(position * scale)
        self.register_buffer("encoding", encoding)

    def forward(self, x):
        return x + self.encoding[:x.shape[1]]


class TransformerLM(nn.Module):
    """The guide's language model: embedding, positions, Transformer layers, a linear layer."""

    def __init__(self, vocab_size, d_model, nhead, num_layers, seq_len):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        # FIXED: the positions are added to the embeddings, not to the token ids
        self.pos_encoder = PositionalEncoding(d_model, max_len=seq_len)
        # FIXED: batch-first layers, for (batch, sequence) data; the article's nn.Transformer
        # reads (sequence, batch) and also wants a decoder input a language model does not have
        layer = nn.TransformerEncoderLayer(d_model, nhead, batch_first=True)
        self.transformer = nn.TransformerEncoder(layer, num_layers)
        self.fc = nn.Linear(d_model, vocab_size)

    def forward(self, x):
        # FIXED: a causal mask, so that position t never sees the tokens it must predict
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1], device=x.device)
        hidden = self.transformer(self.pos_encoder(self.embedding(x)), mask=mask, is_causal=True)
        return self.fc(hidden)  # logits for every position: (batch, sequence, vocab)
