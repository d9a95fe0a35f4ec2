"""Trainium (torch-neuronx), and the XLA lane under ``TRNSCIPY_EMULATE=neuron``: the XLA
backend as it is.  NKI kernels plug in here as methods overriding ``Xla``'s."""

from trnscipy._kernels._xla import Xla


class Neuron(Xla):
    kind = "neuron"
