"""The published code that test_lesson.py and test_gpu_articles.py run: section 6's four
tensors as the blog prints them (four labels for five examples), and the four model classes
of the GPU guide, the longer of the two GPU articles the companion also runs (a third party's,
not part of the tutorial), line for line as the article prints them (its comments left out).
The article never defines the PositionalEncoding its TransformerLM uses: building that class
raises NameError, as published.
Nothing here is the companion's: a proof runs this code, asserts its failure (or its wrong
result), and runs the same assertion on the companion's line (a04, common/gpu_guide.py) as its
control; the other tests load the companion's classes with these classes' weights."""

import torch
import torch.nn as nn
from torch.nn import Transformer

X_train = torch.tensor([
    [-1.2, 3.1],
    [-0.9, 2.9],
    [-0.5, 2.6],
    [2.3, -1.1],
    [2.7, -1.5]
])
y_train = torch.tensor([0, 0, 0, 1])

X_test = torch.tensor([
    [-0.8, 2.8],
    [2.6, -1.6],
])
y_test = torch.tensor([0, 1])


class ConvNet(nn.Module):
    def __init__(self, num_classes=10):
        super(ConvNet, self).__init__()
        self.conv1 = nn.Conv2d(in_channels=3, out_channels=32, kernel_size=3, padding=1)
        self.relu1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.conv2 = nn.Conv2d(in_channels=32, out_channels=64, kernel_size=3, padding=1)
        self.relu2 = nn.ReLU()
        self.pool2 = nn.MaxPool2d(kernel_size=2, stride=2)
        self.fc1 = nn.Linear(in_features=64 * 7 * 7, out_features=128)
        self.relu3 = nn.ReLU()
        self.fc2 = nn.Linear(in_features=128, out_features=num_classes)

    def forward(self, x):
        out = self.conv1(x)
        out = self.relu1(out)
        out = self.pool1(out)
        out = self.conv2(out)
        out = self.relu2(out)
        out = self.pool2(out)
        out = out.view(out.size(0), -1)
        out = self.fc1(out)
        out = self.relu3(out)
        out = self.fc2(out)
        return out


class RNNClassifier(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_classes):
        super(RNNClassifier, self).__init__()
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.rnn = nn.RNN(embedding_dim, hidden_dim)
        self.fc = nn.Linear(hidden_dim, num_classes)

    def forward(self, x):
        embedded = self.embedding(x)
        _, hidden = self.rnn(embedded)
        output = self.fc(hidden.squeeze(0))
        return output


class LSTMGenerator(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden_dim, num_layers):
        super(LSTMGenerator, self).__init__()
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
        super(TransformerLM, self).__init__()
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.pos_encoding = PositionalEncoding(d_model, seq_len)
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
