"""The one C extension: the hit lane's head reader (decision 0055). Everything else about the
package is in pyproject.toml. ``optional=True``: without a C compiler the install goes on,
and ``proxy.core.http.lane`` reads heads with its pure-Python reader, which answers the same."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("proxy.core.http._lane", ["proxy/core/http/_lane.c"], optional=True),
    ]
)
