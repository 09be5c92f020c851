"""The package's identity, under NeMo Lens's `package_info` names. lens has no public home yet: its URLs are empty."""

from lens._native import LENS_VERSION

__version__ = LENS_VERSION

__package_name__ = "lens"
__contact_names__ = "lens developers"
__contact_emails__ = ""
__homepage__ = ""
__repository_url__ = ""
__download_url__ = ""
