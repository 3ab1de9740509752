class Device:
    def __init__(self, device=None):
        if device is not None and not isinstance(device, int):
            if hasattr(device, "id"):
                device = device.id
            else:
                raise TypeError(f"[fake cupy] Device({device!r}): not an int")
        self.id = 0 if device is None else int(device)
        if self.id != 0:
            raise RuntimeError(f"[fake cupy] invalid device ordinal {self.id}")

    def __enter__(self):
        return self

    def __exit__(self, *a):
        pass

    def synchronize(self):
        pass

    def use(self):
        pass

    @property
    def mem_info(self):
        from . import runtime

        return runtime.memGetInfo()

    def __repr__(self):
        return f"<CUDA Device {self.id}>"

    def __eq__(self, o):
        return isinstance(o, Device) and o.id == self.id

    def __hash__(self):
        return hash(self.id)


def get_cusolver_handle():
    return 1


def get_cublas_handle():
    return 2


def get_device_id():
    return 0
