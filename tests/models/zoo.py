"""Whole models for the model tests, with randomly initialised weights made numerically meaningful.

Random init makes some nets degenerate (activations shrinking towards 0, zero-initialised layers), which
would make any comparison pass. `calibrate` re-estimates BatchNorm statistics on random batches in train mode
and gives all-zero weights small random values (zero-initialised heads, the last batch norm of a residual
branch, ConvNeXt V2's global response normalisation), before switching to eval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn


def calibrate(model: nn.Module, batch: Callable[[], torch.Tensor], passes: int = 2) -> nn.Module:
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if name.rsplit(".", 1)[-1] == "weight" and weight.is_floating_point() and not weight.any():
                weight.normal_(0, 0.01)
        norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        for norm in norms:
            norm.reset_running_stats()
            norm.momentum = None  # cumulative average over the calibration passes
        if norms:
            model.train()
            for _ in range(passes):
                model(batch())
    return model.eval()


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))

    def forward(self, x):
        return self.net(x)


class ConvNet(nn.Module):
    """conv + batchnorm + relu + maxpool blocks with a global-average-pool head."""

    def __init__(self, classes: int = 10):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                 nn.MaxPool2d(2))

        self.features = nn.Sequential(block(3, 16), block(16, 32), block(32, 64))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(torch.flatten(self.pool(self.features(x)), 1))


class UNet(nn.Module):
    """A small UNet: strided-conv encoder, ConvTranspose2d / bilinear / nearest decoders, skip concatenations."""

    def __init__(self):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())

        self.enc1, self.enc2, self.enc3 = block(3, 16), block(16, 32), block(32, 64)
        self.down = nn.MaxPool2d(2)
        self.up_t = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.dec2 = block(64, 32)
        self.up_bilinear = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec1 = block(48, 16)
        self.up_corners = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.up_nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(32, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.down(e1))
        e3 = self.enc3(self.down(e2))
        d2 = self.dec2(torch.cat([self.up_t(e3), e2], 1))
        d1 = self.dec1(torch.cat([self.up_bilinear(d2), e1], 1))
        small = self.down(d1)
        return self.head(torch.cat([self.up_corners(small), self.up_nearest(small)], 1))


class SuperResolution(nn.Module):
    """ESPCN-style super resolution: convs, then PixelShuffle to 3x the input size."""

    def __init__(self, scale: int = 3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.Tanh(), nn.Conv2d(32, 16, 3, padding=1),
                                  nn.Tanh(), nn.Conv2d(16, scale * scale, 3, padding=1))
        self.shuffle = nn.PixelShuffle(scale)

    def forward(self, x):
        return torch.sigmoid(self.shuffle(self.body(x)))


class AudioNet(nn.Module):
    """1-D conv audio classifier with GroupNorm and PReLU."""

    def __init__(self, classes: int = 12):
        super().__init__()
        layers, cin = [], 1
        for cout, stride in ((16, 4), (32, 2), (32, 2), (64, 2)):
            layers += [nn.Conv1d(cin, cout, 9, stride=stride, padding=4), nn.GroupNorm(4, cout), nn.PReLU(cout)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(-1))


class SequenceModel(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        if kind == "lstm":
            self.rnn = nn.LSTM(16, 32, 2, batch_first=True)
        elif kind == "bilstm":
            self.rnn = nn.LSTM(16, 32, 1, batch_first=True, bidirectional=True)
        else:
            self.rnn = nn.GRU(16, 32, 1, batch_first=True)
        self.head = nn.Linear(self.rnn.hidden_size * (2 if self.rnn.bidirectional else 1), 5)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out)


class SegmentationOut(nn.Module):
    """torchvision segmentation models return {"out": ..., "aux": ...}; this unwraps "out"."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


class HFLogits(nn.Module):
    """Hugging Face models return ModelOutput objects; these wrappers return plain tensors."""

    def __init__(self, model, fields):
        super().__init__()
        self.model = model
        self.fields = fields

    def forward(self, input_ids):
        out = self.model(input_ids)
        values = tuple(out[f] for f in self.fields)
        return values if len(values) > 1 else values[0]


class HFFeatures(HFLogits):
    """The same for models that take pixels, audio samples or spectrogram features."""

    def forward(self, values):
        return super().forward(values)


def hf(config: str, model: str, fields: tuple[str, ...], wrapper: type = HFLogits, part: str | None = None,
       **settings) -> Callable[[], nn.Module]:
    """A transformers model built from a small config (random weights, nothing downloaded); `part` takes one
    submodule (the encoder of an encoder-decoder)."""
    def build():
        import transformers

        module = getattr(transformers, model)(getattr(transformers, config)(**settings))
        return wrapper(getattr(module, part) if part else module, fields)
    return build


# Small configs: two layers, width 128 (as bert and gpt2 above), the families' own structure otherwise.
SMALL = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 512}
DECODER = {"vocab_size": 1024, "hidden_size": 128, "intermediate_size": 384, "num_hidden_layers": 2,
           "num_attention_heads": 4, "use_cache": False}


def bert():
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=30522, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512)
    return HFLogits(BertModel(config), ("last_hidden_state", "pooler_output"))


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=128, n_head=2, use_cache=False)
    return HFLogits(GPT2LMHeadModel(config), ("logits",))


def deeplab():
    import torchvision

    return SegmentationOut(torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None))


@dataclass
class ModelCase:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], tuple]  # batch size -> sample inputs
    slow: bool = False
    max_transposes: int | None = None  # bound on TRANSPOSE ops where one is known (conv nets: the input one)


def torchvision_model(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build():
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kwargs)
    return build


def segmentation(name: str) -> Callable[[], nn.Module]:
    def build():
        import torchvision

        return SegmentationOut(getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None))
    return build


def timm_model(name: str) -> Callable[[], nn.Module]:
    def build():
        import timm

        return timm.create_model(name, pretrained=False)
    return build


def image(size=224, channels=3):
    return lambda batch: (torch.randn(batch, channels, size, size),)


def tokens(vocab=30522, length=64):
    return lambda batch: (torch.randint(0, vocab, (batch, length)),)


def signal(*shape):
    return lambda batch: (torch.randn(batch, *shape),)


MODELS: list[ModelCase] = [
    ModelCase("mlp", MLP, lambda b: (torch.randn(b, 32),)),
    ModelCase("convnet", ConvNet, image(64), max_transposes=1),
    ModelCase("resnet18", torchvision_model("resnet18"), image(), max_transposes=1),
    ModelCase("mobilenet_v2", torchvision_model("mobilenet_v2"), image(), max_transposes=1),
    ModelCase("mobilenet_v3_small", torchvision_model("mobilenet_v3_small"), image(), max_transposes=1),
    ModelCase("efficientnet_b0", torchvision_model("efficientnet_b0"), image(), max_transposes=1),
    ModelCase("squeezenet1_1", torchvision_model("squeezenet1_1"), image(), max_transposes=1),
    ModelCase("regnet_x_400mf", torchvision_model("regnet_x_400mf"), image(), max_transposes=1),
    # One TRANSPOSE at the input plus the one real data movement of each of the 16 channel shuffles.
    ModelCase("shufflenet_v2_x1_0", torchvision_model("shufflenet_v2_x1_0"), image(), max_transposes=17),
    ModelCase("convnext_tiny", torchvision_model("convnext_tiny"), image(), max_transposes=1),
    # One at the input, then per encoder layer the q, k and v head splits and the head merge (4 x 12): BATCH_MATMUL
    # needs the heads as a leading batch dim.
    ModelCase("vit_b_16", torchvision_model("vit_b_16"), image(), slow=True, max_transposes=49),
    ModelCase("deeplabv3_mobilenet_v3_large", deeplab, image(), max_transposes=2),
    ModelCase("bert", bert, tokens()),
    ModelCase("gpt2", gpt2, tokens(50257)),
    ModelCase("lstm_2layer", lambda: SequenceModel("lstm"), lambda b: (torch.randn(b, 16, 16),)),
    ModelCase("bilstm", lambda: SequenceModel("bilstm"), lambda b: (torch.randn(b, 16, 16),)),
    ModelCase("gru", lambda: SequenceModel("gru"), lambda b: (torch.randn(b, 16, 16),)),
    ModelCase("unet", UNet, image(64), max_transposes=2),
    ModelCase("super_resolution", SuperResolution, image(32, channels=1)),
    ModelCase("audio_groupnorm_prelu", AudioNet, lambda b: (torch.randn(b, 1, 4000),), max_transposes=0),
    # ---- torchvision ------------------------------------------------------------------------------------------
    ModelCase("googlenet", torchvision_model("googlenet", aux_logits=False, init_weights=True), image(),
              max_transposes=1),
    ModelCase("mnasnet1_0", torchvision_model("mnasnet1_0"), image(), max_transposes=1),
    ModelCase("lraspp_mobilenet_v3_large", segmentation("lraspp_mobilenet_v3_large"), image(), max_transposes=2),
    ModelCase("densenet121", torchvision_model("densenet121"), image(), slow=True, max_transposes=1),
    ModelCase("inception_v3", torchvision_model("inception_v3", aux_logits=False, init_weights=True), image(299),
              slow=True, max_transposes=1),
    ModelCase("resnext50_32x4d", torchvision_model("resnext50_32x4d"), image(), slow=True, max_transposes=1),
    ModelCase("efficientnet_v2_s", torchvision_model("efficientnet_v2_s"), image(), slow=True, max_transposes=1),
    # Per block: q, k and v to heads-first (k also transposed for its product), the heads merged, and the
    # window partition and its reverse; rank 4 throughout (one rank-5 transpose of q, k and v together would
    # move as much data and keep no GPU delegate).
    ModelCase("swin_t", torchvision_model("swin_t"), image(), slow=True, max_transposes=57),
    ModelCase("maxvit_t", torchvision_model("maxvit_t"), image(), slow=True, max_transposes=152),
    # ---- Hugging Face transformers, built from small configs ---------------------------------------------------
    ModelCase("distilbert", hf("DistilBertConfig", "DistilBertModel", ("last_hidden_state",), dim=128, n_layers=2,
                               n_heads=2, hidden_dim=512), tokens(), max_transposes=8),
    ModelCase("albert", hf("AlbertConfig", "AlbertModel", ("last_hidden_state", "pooler_output"), embedding_size=64,
                           **SMALL), tokens(30000), max_transposes=8),
    ModelCase("t5_encoder", hf("T5Config", "T5EncoderModel", ("last_hidden_state",), d_model=128, d_kv=32, d_ff=512,
                               num_layers=2, num_heads=4), tokens(32128), max_transposes=8),
    ModelCase("whisper_encoder", hf("WhisperConfig", "WhisperModel", ("last_hidden_state",), HFFeatures, "encoder",
                                    d_model=128, encoder_layers=2, encoder_attention_heads=2, decoder_layers=1,
                                    decoder_attention_heads=2, encoder_ffn_dim=512, max_source_positions=100),
              signal(80, 200), max_transposes=9),
    ModelCase("wav2vec2", hf("Wav2Vec2Config", "Wav2Vec2Model", ("last_hidden_state",), HFFeatures, conv_dim=(64,) * 7,
                             num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, **SMALL),
              signal(16000), max_transposes=8),
    ModelCase("clip_text", hf("CLIPTextConfig", "CLIPTextModel", ("last_hidden_state", "pooler_output"), **SMALL),
              tokens(49408, 77), max_transposes=8),
    ModelCase("clip_vision", hf("CLIPVisionConfig", "CLIPVisionModel", ("last_hidden_state", "pooler_output"),
                                HFFeatures, patch_size=32, **SMALL), image(), max_transposes=9),
    ModelCase("mobilevit", hf("MobileViTConfig", "MobileViTForImageClassification", ("logits",), HFFeatures,
                              num_labels=10), image(256), max_transposes=55),
    ModelCase("convnextv2", hf("ConvNextV2Config", "ConvNextV2ForImageClassification", ("logits",), HFFeatures,
                               hidden_sizes=[32, 64, 128, 256], depths=[1, 1, 2, 1], num_labels=10), image(),
              max_transposes=1),
    ModelCase("segformer", hf("SegformerConfig", "SegformerForSemanticSegmentation", ("logits",), HFFeatures,
                              num_labels=10, hidden_sizes=[32, 64, 160, 256], decoder_hidden_size=128), image(256),
              max_transposes=26),
    ModelCase("llama", hf("LlamaConfig", "LlamaForCausalLM", ("logits",), num_key_value_heads=2, **DECODER),
              tokens(1024), max_transposes=8),
    ModelCase("phi", hf("PhiConfig", "PhiForCausalLM", ("logits",), **DECODER), tokens(1024), max_transposes=8),
    # ---- timm ---------------------------------------------------------------------------------------------------
    ModelCase("ghostnet_100", timm_model("ghostnet_100"), image(), max_transposes=1),
    ModelCase("mobilenetv4_conv_small", timm_model("mobilenetv4_conv_small"), image(), max_transposes=1),
    ModelCase("efficientformer_l1", timm_model("efficientformer_l1"), image(), max_transposes=5),
    ModelCase("levit_128s", timm_model("levit_128s"), image(), max_transposes=45),
    ModelCase("fastvit_t8", timm_model("fastvit_t8"), image(256), slow=True, max_transposes=1),
    ModelCase("mobileone_s0", timm_model("mobileone_s0"), image(), slow=True, max_transposes=1),
    ModelCase("repvit_m1", timm_model("repvit_m1"), image(), slow=True, max_transposes=1),
    ModelCase("efficientvit_b0", timm_model("efficientvit_b0"), image(), slow=True, max_transposes=21),
    ModelCase("edgenext_xx_small", timm_model("edgenext_xx_small"), image(256), max_transposes=13),
]


def build(case: ModelCase) -> nn.Module:
    torch.manual_seed(0)
    model = case.build()
    return calibrate(model, lambda: case.inputs(4)[0])
