"""float64 expm_multiply on a Neuron device (placeholder: the device method)."""


def expm_multiply(scipy_func, device_func, args, kwargs):
    return device_func(*args, **kwargs)
