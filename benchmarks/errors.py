"""One-line error text for report cells and worker results."""


def error_text(error: BaseException) -> str:
    """``"Type: message"`` on one line, at most 400 characters: a longer one keeps its first
    150 and last 245 (TensorFlow puts the cause at the end of a long traceback)."""
    text = f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return text if len(text) <= 400 else text[:150] + " ... " + text[-245:]
