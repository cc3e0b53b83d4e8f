"""Every bound the gateway puts on an image input, in one place."""

from __future__ import annotations

MAX_IMAGES = 16  # image parts per request (the whole conversation); more: 400
MAX_IMAGE_BYTES = 20 * 1024 * 1024  # decoded (or downloaded) bytes of one image; more: 400
MAX_PIXELS = 50_000_000  # width x height as the file declares it, checked before decoding
# every image of one request together, as declared, checked before each is decoded: 16 images of
# 7000x7000 (2.3 MB of PNG in all) cost 81 s of server time (decodes here, preprocessing in the
# worker), all of it for one request
MAX_REQUEST_PIXELS = 2 * MAX_PIXELS
# A body with images may be larger than the text limit (edge/limits.py MAX_BODY_BYTES) by the
# size of its base64 image data, up to this many bytes in all; larger bodies get 413.
MAX_IMAGE_BODY_BYTES = 64 * 1024 * 1024

# MIME types of data URLs and Anthropic base64 sources -> the format Pillow must find in the bytes
MIME_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/jpg": "JPEG",
                "image/webp": "WEBP", "image/gif": "GIF"}
FORMATS = ("PNG", "JPEG", "WEBP", "GIF")  # the only decoders Pillow may use on client bytes
DETAILS = ("auto", "low", "high")
# images decoded at once by the gateway (each in a thread): a 50 MP image takes 200 MB decoded,
# so concurrent requests queue here rather than multiply that
MAX_CONCURRENT_DECODES = 2

# http(s) image URLs (only with --allow-image-urls)
FETCH_CONNECT_S = 5.0  # per connection attempt
FETCH_READ_S = 10.0  # between two reads of the body
FETCH_TOTAL_S = 20.0  # the whole fetch, redirects included
FETCH_REQUEST_S = 30.0  # all the image URLs of one request together
MAX_REDIRECTS = 3
URL_SCHEMES = ("http", "https")
MAX_URL_CHARS = 8192  # an http(s) URL longer than this is refused unread
SHOWN_CHARS = 64  # at most this much of any URL appears in an error message
