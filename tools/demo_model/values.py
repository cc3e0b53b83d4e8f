"""Value generators (cities, words, numbers, emails) and tool schemas for the demo data."""

from __future__ import annotations

import random
from typing import Any

# --------------------------------------------------------------------------- values

CITIES = [
    "Paris", "Tokyo", "London", "Berlin", "Madrid", "Rome", "Lisbon", "Vienna", "Prague",
    "Warsaw", "Budapest", "Dublin", "Oslo", "Stockholm", "Helsinki", "Copenhagen",
    "Amsterdam", "Brussels", "Zurich", "Geneva", "Munich", "Hamburg", "Milan", "Naples",
    "Barcelona", "Seville", "Valencia", "Porto", "Athens", "Istanbul", "Moscow", "Kyiv",
    "Cairo", "Lagos", "Nairobi", "Casablanca", "Accra", "Dakar", "Johannesburg",
    "Cape Town", "Addis Ababa", "Dubai", "Doha", "Riyadh", "Tehran", "Karachi", "Lahore",
    "Delhi", "New Delhi", "Mumbai", "Bangalore", "Chennai", "Kolkata", "Dhaka", "Kathmandu",
    "Colombo", "Bangkok", "Hanoi", "Ho Chi Minh City", "Singapore", "Kuala Lumpur",
    "Jakarta", "Manila", "Seoul", "Busan", "Beijing", "Shanghai", "Shenzhen", "Hong Kong",
    "Taipei", "Osaka", "Kyoto", "Sapporo", "Sydney", "Melbourne", "Brisbane", "Perth",
    "Auckland", "Wellington", "New York", "Los Angeles", "San Francisco", "San Diego",
    "Chicago", "Houston", "Dallas", "Austin", "Miami", "Boston", "Seattle", "Denver",
    "Atlanta", "Phoenix", "Portland", "Las Vegas", "Washington", "Philadelphia", "Detroit",
    "Toronto", "Montreal", "Vancouver", "Ottawa", "Calgary", "Mexico City", "Guadalajara",
    "Havana", "Bogota", "Lima", "Quito", "Santiago", "Buenos Aires", "Montevideo",
    "Sao Paulo", "Rio de Janeiro", "Caracas", "Panama City", "Reykjavik", "Edinburgh",
    "Glasgow", "Manchester", "Liverpool", "Lyon", "Marseille", "Nice", "Bordeaux",
    "Frankfurt", "Cologne", "Krakow", "Salt Lake City", "New Orleans", "Kansas City",
    "Tel Aviv", "Abu Dhabi", "Kuwait City", "St Louis", "Hobart", "Nagoya", "Florence",
    "Venice", "Bologna", "Turin", "Antwerp", "Rotterdam", "Bern", "Basel", "Tallinn",
    "Riga", "Vilnius", "Sofia", "Bucharest", "Belgrade", "Zagreb", "Ljubljana", "Tunis",
    "Algiers", "Kigali", "Kampala", "Luanda", "Harare", "Lusaka", "Ulaanbaatar", "Almaty",
    "Tashkent", "Baku", "Tbilisi", "Yerevan", "Minneapolis", "Nashville", "Orlando",
    "Pittsburgh", "Cleveland", "Honolulu", "Anchorage", "Quebec City", "Winnipeg",
]
# A few non-ASCII spellings, so byte-level text is exercised.
CITIES_UNICODE = ["São Paulo", "Zürich", "Montréal", "Kraków", "Málaga", "Düsseldorf",
                  "Bogotá", "Reykjavík", "Malmö", "Orléans"]

SYLLABLES = [
    "ba", "be", "bo", "ca", "co", "da", "de", "do", "el", "en", "fa", "fi", "ga", "go",
    "ha", "is", "ka", "ke", "la", "le", "li", "lo", "ma", "me", "mi", "mo", "na", "ne",
    "no", "or", "pa", "pe", "ra", "re", "ri", "ro", "sa", "se", "si", "ta", "te", "ti",
    "to", "va", "ve", "vi", "wa", "za", "ar", "an", "on", "ur", "ex", "ly", "dor", "ven",
    "mar", "tor", "lin", "berg", "ford", "ton", "ville", "burg", "stad", "holm", "port",
]
CITY_PREFIXES = ["New", "San", "Port", "Fort", "Lake", "Saint", "East", "West", "North",
                 "South", "Old", "Mount", "Santa", "Los", "El", "La"]

TIMEZONE_CITIES = CITIES  # get_time takes a city (or zone) name

CONDITIONS = ["sunny", "cloudy", "rainy", "snowy", "windy", "foggy", "clear", "stormy",
              "partly cloudy", "overcast", "drizzly", "humid", "hazy"]

WORDS = [
    "pizza", "recipes", "python", "tutorial", "history", "rome", "electric", "cars",
    "best", "cheap", "flights", "hotels", "news", "weather", "football", "scores",
    "machine", "learning", "music", "festivals", "healthy", "breakfast", "ideas",
    "garden", "tips", "coffee", "shops", "near", "me", "how", "to", "bake", "bread",
    "learn", "guitar", "space", "travel", "ancient", "egypt", "climate", "change",
    "solar", "panels", "running", "shoes", "vegan", "dinner", "chess", "openings",
    "cheap", "laptops", "mountain", "bikes", "jazz", "history", "of", "the", "internet",
    "quantum", "computing", "basics", "french", "phrases", "dog", "training", "yoga",
    "for", "beginners", "movie", "reviews", "book", "summaries", "tax", "rules",
    "camping", "gear", "home", "workouts", "rust", "async", "mlx", "models", "apple",
    "silicon", "sushi", "tea", "volcanoes", "ocean", "tides", "birds", "stars", "moon",
    "marathon", "plans", "budget", "trip", "ideas", "wine", "cheese", "pasta", "salad",
]
SUBJECT_WORDS = [
    "meeting", "tomorrow", "project", "update", "lunch", "on", "friday", "budget",
    "review", "weekly", "report", "party", "invitation", "quick", "question", "schedule",
    "change", "hello", "from", "paris", "team", "dinner", "plans", "contract", "draft",
    "holiday", "photos", "thanks", "notes", "today", "call", "at", "noon", "launch",
    "status", "new", "ideas", "reminder", "deadline", "next", "week", "trip", "tickets",
]
NAMES = ["alice", "bob", "carol", "dave", "eve", "frank", "grace", "heidi", "ivan", "judy",
         "mallory", "oscar", "peggy", "trent", "victor", "walter", "maria", "li", "sam",
         "noah", "emma", "liam", "olivia", "ava", "mia", "lucas", "sofia", "omar", "yuki",
         "raj", "anna", "tom", "kate", "max", "zoe", "leo", "nina", "paul", "sara", "john"]
DOMAINS = ["example.com", "mail.com", "work.org", "company.io", "test.net", "school.edu",
           "home.net", "startup.ai", "corp.co", "gmail.com"]


def pseudo_word(rng: random.Random) -> str:
    """A made-up capitalized word of 2-4 syllables."""
    n = rng.choice([2, 2, 3, 3, 4])
    return "".join(rng.choice(SYLLABLES) for _ in range(n)).capitalize()


def random_city(rng: random.Random) -> str:
    """A real city most of the time, a made-up one often enough to force copying."""
    r = rng.random()
    if r < 0.55:
        return rng.choice(CITIES)
    if r < 0.60:
        return rng.choice(CITIES_UNICODE)
    if r < 0.85:
        return pseudo_word(rng)
    return f"{rng.choice(CITY_PREFIXES)} {pseudo_word(rng)}"


def random_phrase(rng: random.Random, words: list[str], lo: int = 1, hi: int = 4) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(lo, hi)))


def random_query(rng: random.Random) -> str:
    q = random_phrase(rng, WORDS, 1, 4)
    if rng.random() < 0.2:
        q = f"{q} {rng.choice(CITIES)}"
    return q


def random_subject(rng: random.Random) -> str:
    s = random_phrase(rng, SUBJECT_WORDS, 1, 4)
    return s[0].upper() + s[1:]


def random_email(rng: random.Random) -> str:
    name = rng.choice(NAMES)
    if rng.random() < 0.3:
        name = f"{name}.{rng.choice(NAMES)}"
    elif rng.random() < 0.2:
        name = f"{name}{rng.randint(1, 99)}"
    return f"{name}@{rng.choice(DOMAINS)}"


def random_number(rng: random.Random) -> int | float:
    r = rng.random()
    if r < 0.45:
        return rng.randint(0, 99)
    if r < 0.8:
        return rng.randint(100, 9999)
    if r < 0.9:
        return -rng.randint(1, 500)
    return round(rng.uniform(0, 100), rng.choice([1, 2]))


# --------------------------------------------------------------------------- tools


def _tool(name: str, description: str, params: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": params,
                "required": list(params),
            },
        },
    }


def _param(typ: str, desc: str | None) -> dict[str, Any]:
    return {"type": typ, "description": desc} if desc else {"type": typ}


def make_tool(rng: random.Random, name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A tool schema (with some wording variety) and the names of its parameters."""
    if name == "get_weather":
        key = "city" if rng.random() < 0.75 else "location"
        desc = rng.choice([
            "Get the current weather in a given city.",
            "Get the current weather for a location.",
            "Returns the weather forecast for a city.",
            "Get weather",
        ])
        pdesc = rng.choice(["The city name, e.g. Paris", "City to get the weather for", None])
        return _tool(name, desc, {key: _param("string", pdesc)}), {"city": key}
    if name == "get_time":
        key = "city" if rng.random() < 0.6 else "timezone"
        desc = rng.choice([
            "Get the current local time in a city.",
            "Get the current time for a city or timezone.",
            "Returns the local time.",
        ])
        pdesc = rng.choice(["City or timezone name, e.g. Tokyo", "The place to get the time for", None])
        return _tool(name, desc, {key: _param("string", pdesc)}), {"city": key}
    if name == "add":
        desc = rng.choice(["Add two numbers.", "Add two numbers and return the sum.", "Calculator: a + b"])
        return _tool(name, desc, {
            "a": _param("number", rng.choice(["The first number", None])),
            "b": _param("number", rng.choice(["The second number", None])),
        }), {"a": "a", "b": "b"}
    if name == "search":
        desc = rng.choice(["Search the web.", "Search the web for a query and return the top results.",
                           "Web search"])
        return _tool(name, desc, {"query": _param("string", rng.choice(["The search query", None]))}), {
            "query": "query"}
    if name == "send_email":
        desc = rng.choice(["Send an email.", "Send an email to a recipient with a subject.",
                           "Send a short email message"])
        return _tool(name, desc, {
            "to": _param("string", rng.choice(["Recipient email address", None])),
            "subject": _param("string", rng.choice(["Email subject", None])),
        }), {"to": "to", "subject": "subject"}
    raise ValueError(name)


TOOL_NAMES = ["get_weather", "get_time", "add", "search", "send_email"]
