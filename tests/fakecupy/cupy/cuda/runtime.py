class CUDARuntimeError(RuntimeError):
    pass


def getDeviceCount():
    return 1


def memGetInfo():
    import psutil

    return (int(psutil.virtual_memory().available), int(psutil.virtual_memory().total))


def runtimeGetVersion():
    return 13000


def driverGetVersion():
    return 13000


def getDeviceProperties(i):
    return {"name": b"Fake GPU", "totalGlobalMem": 80 * 2**30}


def getDevice():
    return 0


def deviceSynchronize():
    pass
