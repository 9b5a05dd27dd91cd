"""One-line error text for report cells and worker results."""


def error_text(error: BaseException) -> str:
    """``"Type: message"`` on one line, at most 300 characters."""
    text = f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."
