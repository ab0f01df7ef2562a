"""The context-reliance benchmark: does the model answer from memory or from the given context?

This is the evaluation set for RePCS, which compares the model's answer distribution with and
without a retrieved context. Every record is a (context, query, answer) triple whose context
states the answer, so every item is answerable open-book. The three kinds differ in whether the
answer is also available closed-book:

* **memorized** (label 1) - 150 well-known facts that even a 135M-parameter model may answer
  without the context: 60 capitals of well-known countries, 30 authors of very famous books,
  25 chemical symbols of common elements and 35 other very common facts (largest planet, days
  in a week, the currency of Japan, ...). Written by hand from general knowledge.
* **memorized_paraphrased** (label 1) - the same 150 facts (same ``fact_id``, context and
  answer) asked with a differently worded question.
* **clean** (label 0) - 150 facts about invented entities (countries, cities, writers,
  elements, planets, compounds, creatures, ...) whose names are built from syllable tables, so
  no model can know them. Their categories, question forms and context style mirror the
  memorized items (60 capital, 30 author, 25 element, 35 misc), so the two classes are not
  separable by question form alone.

Record schema (one JSON object per line)::

    {"id": "rel-mem-000" | "rel-para-000" | "rel-clean-000", "kind": ..., "label": 1 | 0,
     "fact_id": "fact-000" | "clean-000", "category": "capital" | "author" | "element" | "misc",
     "context": ..., "query": ..., "answer": ..., "aliases": [...]}

A generation is scored with :func:`answer_matches` (case-, accent- and punctuation-insensitive,
whole words and whole numbers only). Only ``random.Random(seed)`` and the hard-coded tables
below are used, so the output is byte-identical on every run. The shipped file is regenerated
with::

    python -m mnemoscope.bench.reliance --out src/mnemoscope/bench/data

Example:
    >>> from mnemoscope.bench.reliance import answer_matches, load_reliance
    >>> items = load_reliance()
    >>> len(items), sum(item["label"] for item in items)
    (450, 300)
    >>> answer_matches("The capital is PARIS.", items[0])
    True
"""

from __future__ import annotations

import argparse
import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from mnemoscope.bench.corpus import read_jsonl, to_jsonl

__all__ = [
    "CATEGORIES",
    "KINDS",
    "LABELS",
    "RELIANCE_FILE",
    "answer_matches",
    "generate_reliance",
    "load_reliance",
    "main",
    "write_reliance",
]

RELIANCE_FILE = "context_reliance.jsonl"
KINDS = ("memorized", "memorized_paraphrased", "clean")
LABELS = {"memorized": 1, "memorized_paraphrased": 1, "clean": 0}
CATEGORIES = ("capital", "author", "element", "misc")
_ID_PREFIX = {"memorized": "rel-mem", "memorized_paraphrased": "rel-para", "clean": "rel-clean"}

Record = dict[str, Any]

# ---------------------------------------------------------------------------------------
# Memorized facts (hand-written; every statement is meant to be plainly correct)
# ---------------------------------------------------------------------------------------

# (country as used in "the capital of X", capital, context, aliases)
_CAPITALS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    ("France", "Paris", "Paris is the capital and largest city of France. It lies on the river Seine.", ()),
    ("Japan", "Tokyo", "Tokyo is the capital of Japan and one of the most populous cities in the world.", ()),
    ("Italy", "Rome", "Rome is the capital city of Italy. It is built on the banks of the river Tiber.", ()),
    (
        "Germany",
        "Berlin",
        "Berlin is the capital and largest city of Germany. It lies on the river Spree.",
        (),
    ),
    (
        "Spain",
        "Madrid",
        "Madrid is the capital and largest city of Spain. It sits near the centre of the Iberian Peninsula.",
        (),
    ),
    (
        "the United Kingdom",
        "London",
        "London is the capital of the United Kingdom and of England. It stands on the river Thames.",
        (),
    ),
    (
        "Russia",
        "Moscow",
        "Moscow is the capital and largest city of Russia. It lies on the Moskva River.",
        (),
    ),
    (
        "China",
        "Beijing",
        "Beijing is the capital of China. It is home to the Forbidden City, the former imperial palace.",
        ("Peking",),
    ),
    (
        "India",
        "New Delhi",
        "New Delhi is the capital of India. It lies within the wider Delhi metropolitan area.",
        ("Delhi",),
    ),
    (
        "Egypt",
        "Cairo",
        "Cairo is the capital and largest city of Egypt. It lies on the banks of the river Nile.",
        (),
    ),
    (
        "Canada",
        "Ottawa",
        "Ottawa is the capital city of Canada. It is located in the province of Ontario.",
        (),
    ),
    (
        "Australia",
        "Canberra",
        "Canberra is the capital city of Australia. It was purpose-built as the seat of the national government.",
        (),
    ),
    (
        "the United States",
        "Washington",
        "Washington, D.C. is the capital of the United States. It is home to the White House and the Capitol.",
        ("Washington, D.C.", "Washington DC"),
    ),
    (
        "Brazil",
        "Brasilia",
        "Brasilia is the capital of Brazil. It was inaugurated in 1960 as a planned city in the country's interior.",
        (),
    ),
    (
        "Mexico",
        "Mexico City",
        "Mexico City is the capital and largest city of Mexico. It stands on the site of the Aztec city of Tenochtitlan.",
        (),
    ),
    (
        "Argentina",
        "Buenos Aires",
        "Buenos Aires is the capital and largest city of Argentina. It lies on the Rio de la Plata.",
        (),
    ),
    (
        "Greece",
        "Athens",
        "Athens is the capital and largest city of Greece. It is famous for the Acropolis and its ancient temples.",
        (),
    ),
    (
        "Portugal",
        "Lisbon",
        "Lisbon is the capital and largest city of Portugal. It lies at the mouth of the river Tagus.",
        ("Lisboa",),
    ),
    (
        "the Netherlands",
        "Amsterdam",
        "Amsterdam is the capital of the Netherlands, although the government sits in The Hague. "
        "The city is known for its canals.",
        (),
    ),
    (
        "Belgium",
        "Brussels",
        "Brussels is the capital of Belgium. It hosts the main institutions of the European Union.",
        (),
    ),
    (
        "Sweden",
        "Stockholm",
        "Stockholm is the capital and largest city of Sweden. It is built across a group of islands on the Baltic coast.",
        (),
    ),
    (
        "Norway",
        "Oslo",
        "Oslo is the capital and most populous city of Norway. It lies at the head of the Oslofjord.",
        (),
    ),
    (
        "Denmark",
        "Copenhagen",
        "Copenhagen is the capital and largest city of Denmark. It lies on the east coast of the island of Zealand.",
        (),
    ),
    (
        "Finland",
        "Helsinki",
        "Helsinki is the capital and largest city of Finland. It lies on the shore of the Gulf of Finland.",
        (),
    ),
    (
        "Poland",
        "Warsaw",
        "Warsaw is the capital and largest city of Poland. It stands on the river Vistula.",
        (),
    ),
    (
        "Austria",
        "Vienna",
        "Vienna is the capital and largest city of Austria. It lies on the river Danube.",
        ("Wien",),
    ),
    (
        "Switzerland",
        "Bern",
        "Bern is the capital of Switzerland, where the federal government and parliament sit.",
        ("Berne",),
    ),
    (
        "Ireland",
        "Dublin",
        "Dublin is the capital and largest city of Ireland. It lies at the mouth of the river Liffey.",
        (),
    ),
    ("Turkey", "Ankara", "Ankara is the capital of Turkey. It replaced Istanbul as the capital in 1923.", ()),
    (
        "South Korea",
        "Seoul",
        "Seoul is the capital and largest city of South Korea. The Han River flows through the city.",
        (),
    ),
    (
        "Thailand",
        "Bangkok",
        "Bangkok is the capital and most populous city of Thailand. It lies on the Chao Phraya River.",
        (),
    ),
    (
        "Vietnam",
        "Hanoi",
        "Hanoi is the capital of Vietnam. It lies on the Red River in the north of the country.",
        (),
    ),
    (
        "the Philippines",
        "Manila",
        "Manila is the capital of the Philippines. It lies on the eastern shore of Manila Bay.",
        (),
    ),
    (
        "Kenya",
        "Nairobi",
        "Nairobi is the capital and largest city of Kenya. A national park lies on the edge of the city.",
        (),
    ),
    ("Nigeria", "Abuja", "Abuja is the capital of Nigeria. It replaced Lagos as the capital in 1991.", ()),
    (
        "Peru",
        "Lima",
        "Lima is the capital and largest city of Peru. It lies on the Pacific coast of South America.",
        (),
    ),
    (
        "Chile",
        "Santiago",
        "Santiago is the capital and largest city of Chile. It lies in a valley below the Andes.",
        (),
    ),
    (
        "Colombia",
        "Bogota",
        "Bogota is the capital and largest city of Colombia. It sits on a high plateau in the Andes.",
        (),
    ),
    (
        "Cuba",
        "Havana",
        "Havana is the capital and largest city of Cuba. It lies on the north coast of the island.",
        (),
    ),
    (
        "Iran",
        "Tehran",
        "Tehran is the capital and largest city of Iran. It lies at the foot of the Alborz mountains.",
        (),
    ),
    ("Iraq", "Baghdad", "Baghdad is the capital and largest city of Iraq. It lies on the river Tigris.", ()),
    (
        "Saudi Arabia",
        "Riyadh",
        "Riyadh is the capital and largest city of Saudi Arabia. It lies in the centre of the Arabian Peninsula.",
        (),
    ),
    (
        "Pakistan",
        "Islamabad",
        "Islamabad is the capital of Pakistan. It was built as a planned city in the 1960s.",
        (),
    ),
    (
        "Afghanistan",
        "Kabul",
        "Kabul is the capital and largest city of Afghanistan. It lies in a high valley in the east of the country.",
        (),
    ),
    (
        "Hungary",
        "Budapest",
        "Budapest is the capital of Hungary. The river Danube divides the city into Buda and Pest.",
        (),
    ),
    (
        "the Czech Republic",
        "Prague",
        "Prague is the capital and largest city of the Czech Republic. It lies on the river Vltava.",
        ("Praha",),
    ),
    ("Romania", "Bucharest", "Bucharest is the capital and largest city of Romania.", ()),
    (
        "Ukraine",
        "Kyiv",
        "Kyiv is the capital and largest city of Ukraine. It lies on the river Dnipro.",
        ("Kiev",),
    ),
    (
        "Iceland",
        "Reykjavik",
        "Reykjavik is the capital and largest city of Iceland. It is the northernmost capital of a sovereign state.",
        (),
    ),
    (
        "New Zealand",
        "Wellington",
        "Wellington is the capital of New Zealand. It lies at the southern tip of the North Island.",
        (),
    ),
    (
        "Scotland",
        "Edinburgh",
        "Edinburgh is the capital of Scotland. Its castle stands on the rock of an extinct volcano.",
        (),
    ),
    (
        "Morocco",
        "Rabat",
        "Rabat is the capital of Morocco. It lies on the Atlantic coast at the mouth of the Bou Regreg river.",
        (),
    ),
    (
        "Ethiopia",
        "Addis Ababa",
        "Addis Ababa is the capital and largest city of Ethiopia. It is the headquarters of the African Union.",
        (),
    ),
    (
        "Venezuela",
        "Caracas",
        "Caracas is the capital of Venezuela. It lies in a mountain valley near the Caribbean coast.",
        (),
    ),
    (
        "Bulgaria",
        "Sofia",
        "Sofia is the capital and largest city of Bulgaria. It lies at the foot of Mount Vitosha.",
        (),
    ),
    (
        "Serbia",
        "Belgrade",
        "Belgrade is the capital of Serbia. It lies where the river Sava meets the Danube.",
        (),
    ),
    ("Croatia", "Zagreb", "Zagreb is the capital and largest city of Croatia.", ()),
    (
        "Syria",
        "Damascus",
        "Damascus is the capital of Syria. It is one of the oldest continuously inhabited cities in the world.",
        (),
    ),
    (
        "Nepal",
        "Kathmandu",
        "Kathmandu is the capital and largest city of Nepal. It lies in a valley in the Himalayas.",
        (),
    ),
    (
        "Ghana",
        "Accra",
        "Accra is the capital of Ghana. It lies on the Gulf of Guinea coast of West Africa.",
        (),
    ),
)

# (the work as used in "Who wrote X?", author, context, aliases)
_AUTHORS: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (
        "the play Romeo and Juliet",
        "Shakespeare",
        "Romeo and Juliet is a tragedy written by William Shakespeare. "
        "It tells the story of two young lovers from feuding families in Verona.",
        ("William Shakespeare",),
    ),
    (
        "the novel Pride and Prejudice",
        "Jane Austen",
        "Pride and Prejudice is a novel by Jane Austen, published in 1813. It follows Elizabeth Bennet and Mr Darcy.",
        ("Austen",),
    ),
    (
        "the novel Nineteen Eighty-Four",
        "George Orwell",
        "Nineteen Eighty-Four is a dystopian novel by George Orwell, published in 1949.",
        ("Orwell",),
    ),
    (
        "the Harry Potter books",
        "J. K. Rowling",
        "The Harry Potter fantasy novels were written by J. K. Rowling. The first book in the series appeared in 1997.",
        ("Rowling",),
    ),
    (
        "the novel The Lord of the Rings",
        "J. R. R. Tolkien",
        "The Lord of the Rings is an epic fantasy novel by J. R. R. Tolkien. "
        "It was first published in three volumes in 1954 and 1955.",
        ("Tolkien",),
    ),
    (
        "the novel Don Quixote",
        "Miguel de Cervantes",
        "Don Quixote is a Spanish novel by Miguel de Cervantes. Its first part was published in 1605.",
        ("Cervantes",),
    ),
    (
        "the novel War and Peace",
        "Leo Tolstoy",
        "War and Peace is a novel by the Russian author Leo Tolstoy. It is set during the Napoleonic Wars.",
        ("Tolstoy",),
    ),
    (
        "the novel Crime and Punishment",
        "Fyodor Dostoevsky",
        "Crime and Punishment is a novel by Fyodor Dostoevsky, published in 1866. "
        "It follows a poor student in Saint Petersburg.",
        ("Dostoevsky", "Dostoyevsky"),
    ),
    (
        "the epic poem the Odyssey",
        "Homer",
        "The Odyssey is an ancient Greek epic poem attributed to Homer. "
        "It tells of the long journey home of Odysseus after the Trojan War.",
        (),
    ),
    (
        "the novel The Adventures of Tom Sawyer",
        "Mark Twain",
        "The Adventures of Tom Sawyer is a novel by Mark Twain, published in 1876. "
        "It is set in a town on the Mississippi River.",
        ("Twain", "Samuel Clemens"),
    ),
    (
        "the novel Oliver Twist",
        "Charles Dickens",
        "Oliver Twist is a novel by Charles Dickens. It tells the story of an orphan boy in London.",
        ("Dickens",),
    ),
    (
        "the novel Moby-Dick",
        "Herman Melville",
        "Moby-Dick is a novel by Herman Melville, published in 1851. It tells of Captain Ahab's hunt for a white whale.",
        ("Melville",),
    ),
    (
        "the novel Frankenstein",
        "Mary Shelley",
        "Frankenstein is a novel by Mary Shelley, published in 1818. "
        "It tells of a scientist who creates a living creature.",
        ("Shelley",),
    ),
    (
        "the novel Dracula",
        "Bram Stoker",
        "Dracula is a gothic horror novel by Bram Stoker, published in 1897.",
        ("Stoker",),
    ),
    (
        "the novel The Great Gatsby",
        "F. Scott Fitzgerald",
        "The Great Gatsby is a novel by F. Scott Fitzgerald, published in 1925.",
        ("Fitzgerald", "Scott Fitzgerald"),
    ),
    (
        "the novel The Old Man and the Sea",
        "Ernest Hemingway",
        "The Old Man and the Sea is a short novel by Ernest Hemingway, published in 1952. "
        "It tells of an old Cuban fisherman and a giant marlin.",
        ("Hemingway",),
    ),
    (
        "the novel Alice's Adventures in Wonderland",
        "Lewis Carroll",
        "Alice's Adventures in Wonderland is a novel by Lewis Carroll, published in 1865.",
        ("Carroll",),
    ),
    (
        "the Sherlock Holmes stories",
        "Arthur Conan Doyle",
        "The Sherlock Holmes stories were written by Arthur Conan Doyle. "
        "They follow a detective who lives at 221B Baker Street in London.",
        ("Conan Doyle", "Doyle"),
    ),
    (
        "the novel Les Miserables",
        "Victor Hugo",
        "Les Miserables is a French novel by Victor Hugo, published in 1862.",
        ("Hugo",),
    ),
    (
        "the Divine Comedy",
        "Dante Alighieri",
        "The Divine Comedy is a long narrative poem by Dante Alighieri. "
        "It describes a journey through Hell, Purgatory and Paradise.",
        ("Dante",),
    ),
    (
        "the novel Jane Eyre",
        "Charlotte Bronte",
        "Jane Eyre is a novel by Charlotte Bronte, published in 1847.",
        ("Bronte",),
    ),
    (
        "the novel To Kill a Mockingbird",
        "Harper Lee",
        "To Kill a Mockingbird is a novel by Harper Lee, published in 1960.",
        (),
    ),
    (
        "the novel Robinson Crusoe",
        "Daniel Defoe",
        "Robinson Crusoe is a novel by Daniel Defoe, published in 1719. Its hero is shipwrecked on a remote island.",
        ("Defoe",),
    ),
    (
        "the novel Gulliver's Travels",
        "Jonathan Swift",
        "Gulliver's Travels is a satirical novel by Jonathan Swift, published in 1726.",
        ("Swift",),
    ),
    (
        "the novel Little Women",
        "Louisa May Alcott",
        "Little Women is a novel by Louisa May Alcott about the four March sisters.",
        ("Alcott",),
    ),
    (
        "the story collection The Jungle Book",
        "Rudyard Kipling",
        "The Jungle Book is a collection of stories by Rudyard Kipling, published in 1894. "
        "Its best-known hero is the boy Mowgli.",
        ("Kipling",),
    ),
    (
        "the novel Treasure Island",
        "Robert Louis Stevenson",
        "Treasure Island is an adventure novel by Robert Louis Stevenson, published in 1883.",
        ("Stevenson",),
    ),
    (
        "the book The Little Prince",
        "Antoine de Saint-Exupery",
        "The Little Prince is a novella by Antoine de Saint-Exupery, published in 1943.",
        ("Saint-Exupery",),
    ),
    (
        "the children's book The Cat in the Hat",
        "Dr. Seuss",
        "The Cat in the Hat is a children's book by Dr. Seuss, published in 1957.",
        ("Seuss", "Theodor Geisel"),
    ),
    (
        "the novel Charlie and the Chocolate Factory",
        "Roald Dahl",
        "Charlie and the Chocolate Factory is a children's novel by Roald Dahl, published in 1964.",
        ("Dahl",),
    ),
)

# (element, symbol, atomic number, description completing "It is ...")
_ELEMENTS: tuple[tuple[str, str, int, str], ...] = (
    ("gold", "Au", 79, "a soft, yellow precious metal"),
    ("silver", "Ag", 47, "a shiny white metal that conducts electricity better than any other element"),
    ("iron", "Fe", 26, "the main component of steel"),
    ("copper", "Cu", 29, "a reddish metal widely used in electrical wiring"),
    ("oxygen", "O", 8, "a colourless gas that makes up about a fifth of the air"),
    ("hydrogen", "H", 1, "the lightest and most abundant element in the universe"),
    ("carbon", "C", 6, "the element found in diamond, graphite and all known life"),
    ("nitrogen", "N", 7, "a colourless gas that makes up most of the Earth's atmosphere"),
    ("sodium", "Na", 11, "a soft, highly reactive metal found in table salt"),
    ("potassium", "K", 19, "a soft metal that reacts vigorously with water"),
    ("helium", "He", 2, "a light noble gas used to fill balloons"),
    ("calcium", "Ca", 20, "a metal that is essential for healthy bones and teeth"),
    ("lead", "Pb", 82, "a heavy, soft and toxic metal"),
    ("mercury", "Hg", 80, "the only metal that is liquid at room temperature"),
    ("tin", "Sn", 50, "a silvery metal used to coat steel cans"),
    ("zinc", "Zn", 30, "a bluish-grey metal used to galvanise steel"),
    ("aluminium", "Al", 13, "a light, silvery metal used in drink cans and aircraft"),
    ("neon", "Ne", 10, "a noble gas that glows reddish-orange in advertising signs"),
    ("chlorine", "Cl", 17, "a yellow-green gas used to disinfect drinking water"),
    ("sulfur", "S", 16, "a bright yellow non-metal"),
    ("uranium", "U", 92, "a heavy radioactive metal used as nuclear fuel"),
    ("platinum", "Pt", 78, "a dense, unreactive precious metal"),
    ("magnesium", "Mg", 12, "a light metal that burns with a brilliant white flame"),
    ("silicon", "Si", 14, "a metalloid used to make computer chips"),
    ("nickel", "Ni", 28, "a hard, silvery metal used in coins and stainless steel"),
)

# (context, query, paraphrased query, answer, aliases)
_MISC: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    (
        "Jupiter is the largest planet in the Solar System. It is a gas giant and the fifth planet from the Sun.",
        "What is the largest planet in the Solar System?",
        "Which planet in our Solar System is the biggest?",
        "Jupiter",
        (),
    ),
    (
        "On a clear day the sky appears blue, because air scatters blue sunlight more strongly than red light.",
        "What color is the sky on a clear day?",
        "On a cloudless day, what colour does the sky appear to be?",
        "blue",
        (),
    ),
    (
        "A week is a unit of time equal to 7 days.",
        "How many days are there in a week?",
        "A week is made up of how many days?",
        "7",
        ("seven",),
    ),
    (
        "Spanish is the official language of Spain. It is also known as Castilian.",
        "What language is spoken in Spain?",
        "Which language do most people in Spain speak?",
        "Spanish",
        ("Castilian",),
    ),
    (
        "The yen is the official currency of Japan. It is issued by the Bank of Japan.",
        "What is the currency of Japan?",
        "Which currency do people use to pay for things in Japan?",
        "yen",
        ("Japanese yen",),
    ),
    (
        "Pure water freezes at 0 degrees Celsius at standard atmospheric pressure.",
        "At what temperature in degrees Celsius does water freeze?",
        "What is the freezing point of water on the Celsius scale?",
        "0",
        ("zero",),
    ),
    (
        "At sea level, pure water boils at 100 degrees Celsius.",
        "At what temperature in degrees Celsius does water boil at sea level?",
        "What is the boiling point of water at sea level on the Celsius scale?",
        "100",
        ("one hundred",),
    ),
    (
        "A calendar year is divided into 12 months, from January to December.",
        "How many months are there in a year?",
        "A year is made up of how many months?",
        "12",
        ("twelve",),
    ),
    (
        "A day is divided into 24 hours. The Earth turns once on its axis in about that time.",
        "How many hours are there in a day?",
        "A single day contains how many hours?",
        "24",
        ("twenty-four",),
    ),
    (
        "An hour is made up of 60 minutes, and each minute has 60 seconds.",
        "How many minutes are there in an hour?",
        "One hour is equal to how many minutes?",
        "60",
        ("sixty",),
    ),
    (
        "Spiders are arachnids, and an adult spider has 8 legs.",
        "How many legs does a spider have?",
        "What is the number of legs on a spider?",
        "8",
        ("eight",),
    ),
    (
        "The Sun is the star closest to the Earth. It lies about 150 million kilometres away.",
        "What is the closest star to Earth?",
        "Which star is nearest to our planet?",
        "Sun",
        (),
    ),
    (
        "Mars is the fourth planet from the Sun. It is often called the Red Planet because of its reddish colour.",
        "Which planet is known as the Red Planet?",
        "What planet is nicknamed the Red Planet?",
        "Mars",
        (),
    ),
    (
        "The Pacific Ocean is the largest and deepest ocean on Earth.",
        "What is the largest ocean on Earth?",
        "Which ocean covers the greatest area of the planet?",
        "Pacific",
        ("Pacific Ocean",),
    ),
    (
        "Mount Everest is the highest mountain on Earth above sea level. "
        "It lies in the Himalayas on the border between Nepal and China.",
        "What is the highest mountain in the world?",
        "Which mountain has the highest summit on Earth?",
        "Everest",
        ("Mount Everest",),
    ),
    (
        "The Sahara is the largest hot desert in the world. It covers much of North Africa.",
        "What is the largest hot desert in the world?",
        "Which hot desert is the biggest on Earth?",
        "Sahara",
        (),
    ),
    (
        "Water is a chemical compound with the formula H2O. Each molecule has two hydrogen atoms and one oxygen atom.",
        "What is the chemical formula of water?",
        "Which chemical formula describes a molecule of water?",
        "H2O",
        (),
    ),
    (
        "Plants absorb carbon dioxide from the air during photosynthesis and release oxygen.",
        "Which gas do plants absorb from the air for photosynthesis?",
        "During photosynthesis, what gas do plants take in from the air?",
        "carbon dioxide",
        ("CO2",),
    ),
    (
        "The blue whale is the largest animal known to have ever lived. It is a marine mammal that feeds on krill.",
        "What is the largest animal on Earth?",
        "Which animal is the biggest that has ever lived?",
        "blue whale",
        (),
    ),
    (
        "The cheetah is the fastest land animal. It can reach its top speed in a few seconds.",
        "What is the fastest land animal?",
        "Which animal can run faster than any other on land?",
        "cheetah",
        (),
    ),
    (
        "Neil Armstrong was the first person to walk on the Moon. He stepped onto its surface in July 1969.",
        "Who was the first person to walk on the Moon?",
        "Which astronaut was the first to set foot on the Moon?",
        "Neil Armstrong",
        ("Armstrong",),
    ),
    (
        "George Washington was the first President of the United States. He served from 1789 to 1797.",
        "Who was the first President of the United States?",
        "Which man served as the first American president?",
        "George Washington",
        ("Washington",),
    ),
    (
        "The Mona Lisa is a portrait painted by Leonardo da Vinci. It hangs in the Louvre in Paris.",
        "Who painted the Mona Lisa?",
        "Which artist created the painting known as the Mona Lisa?",
        "Leonardo da Vinci",
        ("Leonardo", "da Vinci"),
    ),
    (
        "Albert Einstein developed the theory of relativity. He received the 1921 Nobel Prize in Physics.",
        "Who developed the theory of relativity?",
        "Which physicist is famous for the theory of relativity?",
        "Albert Einstein",
        ("Einstein",),
    ),
    (
        "Portuguese is the official language of Brazil. It was brought to the country by settlers from Portugal.",
        "What language is spoken in Brazil?",
        "Which language do most Brazilians speak?",
        "Portuguese",
        (),
    ),
    (
        "The pound sterling is the official currency of the United Kingdom.",
        "What is the currency of the United Kingdom?",
        "Which currency is used in Britain?",
        "pound",
        ("pound sterling", "pounds", "sterling", "GBP"),
    ),
    (
        "The United States dollar is the official currency of the United States.",
        "What is the currency of the United States?",
        "Which currency do Americans use?",
        "dollar",
        ("dollars", "US dollar", "USD"),
    ),
    (
        "A triangle is a polygon with 3 sides and 3 angles.",
        "How many sides does a triangle have?",
        "What is the number of sides of a triangle?",
        "3",
        ("three",),
    ),
    (
        "A hexagon is a polygon with 6 sides. Honeybees build their combs from hexagonal cells.",
        "How many sides does a hexagon have?",
        "A hexagon is a shape with how many sides?",
        "6",
        ("six",),
    ),
    (
        "Russia is the largest country in the world by area. It spans eleven time zones.",
        "What is the largest country in the world by area?",
        "Which country covers the greatest land area?",
        "Russia",
        (),
    ),
    (
        "Honey bees make honey from the nectar of flowers. They store it in wax combs inside the hive.",
        "What sweet substance do bees make from nectar?",
        "Bees turn the nectar of flowers into which sweet food?",
        "honey",
        (),
    ),
    (
        "The heart is a muscular organ that pumps blood through the body.",
        "Which organ pumps blood through the human body?",
        "What organ pushes blood around the body?",
        "heart",
        (),
    ),
    (
        "French is the official language of France. It is also spoken in Belgium, Switzerland and Canada.",
        "What language is spoken in France?",
        "Which language do people in France speak?",
        "French",
        (),
    ),
    (
        "The euro is the official currency of Germany and of most other members of the European Union.",
        "What is the currency of Germany?",
        "Which currency is used in Germany today?",
        "euro",
        ("euros",),
    ),
    (
        "Asia is the largest continent on Earth by both area and population.",
        "What is the largest continent?",
        "Which continent is the biggest in the world?",
        "Asia",
        (),
    ),
)

_CAPITAL_QUERY = "What is the capital of {x}?"
_AUTHOR_QUERY = "Who wrote {x}?"
_ELEMENT_QUERY = "What is the chemical symbol for {x}?"

# Paraphrases: one is drawn per fact with the seeded generator ("{X}" = capitalised subject).
_CAPITAL_PARAPHRASES = (
    "Which city serves as the capital of {x}?",
    "Which city is the capital city of {x}?",
    "Name the capital city of {x}.",
    "What is the name of the capital city of {x}?",
    "{X} has its capital in which city?",
    "Which city is {x}'s capital?",  # only for subjects not ending in "s"
)
_AUTHOR_PARAPHRASES = (
    "Who is the author of {x}?",
    "Which writer created {x}?",
    "Name the author of {x}.",
    "Who is the writer behind {x}?",
    "Who penned {x}?",
    "Which author is responsible for {x}?",
)
_ELEMENT_PARAPHRASES = (
    "Which symbol represents {x} on the periodic table?",
    "What is the symbol of the element {x}?",
    "In chemistry, which symbol stands for {x}?",
    "How is {x} written as a chemical symbol?",
    "Which one- or two-letter symbol is used for {x}?",
)


def _fill(template: str, subject: str) -> str:
    return template.format(x=subject, X=subject[:1].upper() + subject[1:])


def _paraphrase(rng: random.Random, templates: Sequence[str], subject: str) -> str:
    options = [t for t in templates if not ("{x}'s" in t and subject.endswith("s"))]
    return _fill(rng.choice(options), subject)


def _memorized_facts(rng: random.Random) -> list[tuple[str, str, str, str, str, list[str]]]:
    """(category, context, query, paraphrase, answer, aliases) for the 150 memorized facts."""
    facts: list[tuple[str, str, str, str, str, list[str]]] = []
    for country, city, context, aliases in _CAPITALS:
        query = _fill(_CAPITAL_QUERY, country)
        facts.append(
            ("capital", context, query, _paraphrase(rng, _CAPITAL_PARAPHRASES, country), city, list(aliases))
        )
    for work, author, context, aliases in _AUTHORS:
        query = _fill(_AUTHOR_QUERY, work)
        facts.append(
            ("author", context, query, _paraphrase(rng, _AUTHOR_PARAPHRASES, work), author, list(aliases))
        )
    for name, symbol, number, desc in _ELEMENTS:
        context = f"{name.capitalize()} is a chemical element with the symbol {symbol} and atomic number {number}. It is {desc}."
        query = _fill(_ELEMENT_QUERY, name)
        facts.append(("element", context, query, _paraphrase(rng, _ELEMENT_PARAPHRASES, name), symbol, []))
    for context, query, para, answer, aliases in _MISC:
        facts.append(("misc", context, query, para, answer, list(aliases)))
    return facts


# ---------------------------------------------------------------------------------------
# Answer matching
# ---------------------------------------------------------------------------------------

# A digit-grouping comma ("7,000" -> "7000") so that a grouped number is one whole number.
_DIGIT_GROUP = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# Tokens: an optional minus sign that is not a hyphen after a word ("-7" but not "5-7"), then a
# decimal number ("7.5") or a run of letters and digits ("17", "h2o", "paris"). Everything else
# (spaces, punctuation, underscores) separates tokens.
_TOKEN = re.compile(r"(?:(?<![^\W_])-(?=\d))?(?:\d+(?:\.\d+)+|[^\W_]+)")


def _normalise(text: str) -> str:
    """Casefolded, accent-free tokens joined by single spaces ("Bogotá, D.C.!" -> "bogota d c")."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if not unicodedata.combining(ch)).casefold()
    return " ".join(_TOKEN.findall(_DIGIT_GROUP.sub("", stripped)))


def _collapse_initials(normalised: str) -> str:
    """Runs of two or more single letters joined into one token ("j k rowling" -> "jk rowling")."""
    out: list[str] = []
    run: list[str] = []
    for token in [*normalised.split(), ""]:
        if len(token) == 1 and token.isalpha():
            run.append(token)
            continue
        if len(run) >= 2:
            out.append("".join(run))
        else:
            out.extend(run)
        run = []
        if token:
            out.append(token)
    return " ".join(out)


def _accepted(item: Record) -> list[str]:
    return [str(item["answer"]), *(str(a) for a in item.get("aliases", ()))]


def answer_matches(generation: str, item: Record) -> bool:
    """True if the item's answer or one of its aliases occurs in ``generation`` as a whole word or phrase.

    Matching ignores case, accents, punctuation and spacing, and compares whole tokens only:
    ``"Paris"`` matches ``"It is paris."`` but not ``"Parisian"``, and ``"7"`` matches
    ``"7 days"`` but not ``"17"``, ``"7.5"``, ``"-7"`` or ``"7,000"``. Initials may be written
    with or without dots and spaces (``"J.K. Rowling"``, ``"JK Rowling"`` and ``"J. K. Rowling"``
    all match one another; so do ``"D.C."`` and ``"DC"``).
    """
    plain = _normalise(generation)
    haystack, collapsed = f" {plain} ", f" {_collapse_initials(plain)} "
    for candidate in _accepted(item):
        needle = _normalise(candidate)
        if not needle:
            continue
        if f" {needle} " in haystack or f" {_collapse_initials(needle)} " in collapsed:
            return True
    return False


# ---------------------------------------------------------------------------------------
# Clean items: invented entities
# ---------------------------------------------------------------------------------------

_ONSETS = (
    "b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "pr", "r", "s",
    "sk", "st", "t", "th", "tr", "v", "vr", "z", "sv", "w", "c", "cl", "fr",
)  # fmt: skip
_NUCLEI = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei", "ou", "y", "ia")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "nd", "rn", "sk", "v", "x", "lt", "sh", "rd")
_COUNTRY_ENDINGS = ("ia", "ania", "ora", "esh", "avia", "und", "ira", "eth", "ovia", "ar")
_FIRST_ENDINGS = ("a", "o", "el", "in", "ius", "ette", "an", "ia", "or", "en", "is", "ard")
_ELEMENT_ENDINGS = ("ium", "ium", "ium", "on", "ine", "um")
_COMPOUND_ENDINGS = ("ane", "ol", "ene", "ide", "ose", "ine")
_LANGUAGE_ENDINGS = ("i", "ese", "ic", "ish", "an")
_BLOCKED = ("sex", "kill", "dead", "nazi", "shit", "fuk", "rape", "cum", "porn", "damn", "hell")

_REAL_SYMBOLS = frozenset(
    re.findall(
        r"\S+",
        """H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se
    Br Kr Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy
    Ho Er Tm Yb Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf
    Es Fm Md No Lr Rf Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og""",
    )
)
_TWO_LETTER_WORDS = frozenset(
    re.findall(
        r"\S+",
        """ad ah am an as at ax be by do dr eh em en go ha he hi id if in is it jr lb lo ma me mm mr ms
    mu my no nt of oh oi ok on or ox pa pc pi pm re rd sr st so th to tv uh um un up ur us vs we
    yo ye""",
    )
)

_ORDINALS = ("second", "third", "fourth", "fifth", "sixth", "seventh")
_LANDMARKS = (
    "its painted harbour gate",
    "a seven-arched stone bridge",
    "its covered market hall",
    "the old clock tower on its main square",
    "a round granary in the old town",
)
_ELEMENT_DESCS = (
    "a soft, silvery metal that tarnishes quickly in air",
    "a pale violet gas that is heavier than air",
    "a brittle grey metalloid",
    "a dense, bluish metal used in hard alloys",
    "a heavy radioactive metal",
    "a light metal that burns with a green flame",
    "a rare, reddish metal found in river sands",
    "a waxy yellow non-metal",
)
_JOBS = ("ferryman", "clockmaker", "salt trader", "glassblower", "lighthouse keeper", "rope maker", "weaver")
_TITLE_NOUNS = ("Lanterns", "Orchard", "Harbour", "Salt", "Bells", "Winter", "Ferry", "Tides", "Mirror")
_TITLE_ADJS = ("Quiet", "Last", "Northern", "Broken", "Golden", "Silent", "Flooded")
_SEASONS = ("Winter", "Spring", "Summer", "Autumn")
_PRONOUNS = ("He", "She")


class _Namer:
    """Invents pronounceable names, never the same one twice and never a ``reserved`` word."""

    def __init__(self, rng: random.Random, reserved: Iterable[str]) -> None:
        self.rng = rng
        self.used: set[str] = {w.lower() for w in reserved}

    def _syllables(self, count: int) -> str:
        rng = self.rng
        parts = []
        for i in range(count):
            onset = "" if i == 0 and rng.random() < 0.15 else rng.choice(_ONSETS)
            coda = rng.choice(_CODAS) if i == count - 1 else rng.choice(("", "", "n", "r", "l", "s"))
            parts.append(onset + rng.choice(_NUCLEI) + coda)
        return "".join(parts)

    def _fresh(self, make: Callable[[], str], lo: int = 5, hi: int = 9) -> str:
        while True:
            word = make()
            low = word.lower()
            if lo <= len(word) <= hi and low not in self.used and not any(b in low for b in _BLOCKED):
                self.used.add(low)
                return word

    def _count(self) -> int:
        return 3 if self.rng.random() < 0.25 else 2

    def place(self) -> str:
        return self._fresh(lambda: self._syllables(self._count()).capitalize())

    def country(self) -> str:
        return self._fresh(
            lambda: (self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_COUNTRY_ENDINGS)).capitalize()
        )

    def person(self) -> tuple[str, str]:
        """(full name, surname)."""
        first = self._fresh(
            lambda: (self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_FIRST_ENDINGS)).capitalize(),
            lo=4,
        )
        last = self.place()
        return f"{first} {last}", last

    def element(self) -> str:
        return self._fresh(
            lambda: self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_ELEMENT_ENDINGS)
        )

    def compound(self) -> str:
        return self._fresh(lambda: self._syllables(2) + self.rng.choice(_COMPOUND_ENDINGS))

    def language(self) -> str:
        return self._fresh(
            lambda: (
                self._syllables(self.rng.randint(1, 2)) + self.rng.choice(_LANGUAGE_ENDINGS)
            ).capitalize()
        )

    def common(self, lo: int = 4, hi: int = 8) -> str:
        """A lowercase invented common noun (a currency, a creature, a substance)."""
        return self._fresh(lambda: self._syllables(self.rng.randint(1, 2)), lo=lo, hi=hi)

    def symbol(self, name: str) -> str | None:
        """A two-letter symbol from ``name``: no real element, no common word or abbreviation, unused.

        The second letter is a consonant taken from the third letter on ("pendium" -> "Pn", not
        "Pe"), so the symbol cannot be guessed as simply the first two letters of the name.
        """
        for letter in name[2:]:
            sym = name[0].upper() + letter.lower()
            low = sym.lower()
            if letter in "aeiouy" or low == name[:2] or low in self.used:
                continue
            if sym in _REAL_SYMBOLS or low in _TWO_LETTER_WORDS:
                continue
            self.used.add(low)
            return sym
        return None


_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def _number_words(n: int) -> str:
    """English words for 0 <= n < 100 ("thirty-seven")."""
    if n < 20:
        return _ONES[n]
    tens, ones = divmod(n, 10)
    return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")


class _Numbers:
    """Draws numeric answers that are unused and occur, as digits or words, in no memorized text."""

    def __init__(self, rng: random.Random, texts: Iterable[str]) -> None:
        self.rng = rng
        self.memorized = "\n".join(f" {_normalise(t)} " for t in texts)
        self.used: set[int] = set()

    def _free(self, n: int) -> bool:
        forms = [str(n), _normalise(_number_words(n))] if n < 100 else [str(n)]
        return n not in self.used and not any(f" {form} " in self.memorized for form in forms)

    def draw(self, lo: int, hi: int) -> tuple[str, list[str]]:
        """(digits, [words]) for a free number in ``lo..hi`` (no words from 100 on)."""
        n = self.rng.choice([n for n in range(lo, hi + 1) if self._free(n)])
        self.used.add(n)
        return str(n), ([_number_words(n)] if n < 100 else [])


# A clean builder returns (context, query, answer, aliases).
Clean = tuple[str, str, str, list[str]]


def _clean_capital(rng: random.Random, nm: _Namer, i: int) -> Clean:
    country = nm.country()
    if rng.random() < 0.15:
        country = f"the {country} Islands"
    city = nm.place()
    templates = (
        lambda: f"{city} is the capital and largest city of {country}. It lies on the river {nm.place()}.",
        lambda: f"{city} is the capital of {country}. It stands at the mouth of the river {nm.place()}.",
        lambda: (
            f"{city} is the capital and most populous city of {country}. It lies on the shore of Lake {nm.place()}."
        ),
        lambda: f"{city} is the capital city of {country}. It is located in the province of {nm.place()}.",
        lambda: (
            f"{city} is the capital of {country}. It replaced {nm.place()} as the capital in {rng.randint(1700, 1950)}."
        ),
        lambda: (
            f"{city} is the capital of {country}. It was built as a planned city in the {rng.randint(170, 194)}0s."
        ),
        lambda: (
            f"{city} is the capital and largest city of {country}. It is famous for {rng.choice(_LANDMARKS)}."
        ),
        lambda: f"{city} is the capital of {country}. It lies in a valley below the {nm.place()} Mountains.",
    )
    context = templates[i % len(templates)]()
    return context, _fill(_CAPITAL_QUERY, country), city, []


def _title(rng: random.Random, nm: _Namer) -> str:
    place = nm.place()
    forms = (
        f"The {rng.choice(_TITLE_NOUNS)} of {place}",
        f"{place} in {rng.choice(_SEASONS)}",
        f"The {rng.choice(_TITLE_ADJS)} {rng.choice(_TITLE_NOUNS)} of {place}",
        f"A {rng.choice(_SEASONS)} in {place}",
    )
    return rng.choice(forms)


def _clean_author(rng: random.Random, nm: _Namer, i: int) -> Clean:
    author, last = nm.person()
    kind = i % 6
    if kind == 4:
        series = nm.place()
        work = f"the {series} books"
        context = (
            f"The {series} books are a series of children's novels written by {author}. "
            f"The first book in the series appeared in {rng.randint(1900, 1990)}."
        )
        return context, _fill(_AUTHOR_QUERY, work), author, [last]
    title = _title(rng, nm)
    if kind == 0:
        work = f"the novel {title}"
        context = f"{title} is a novel written by {author}. It tells the story of a {rng.choice(_JOBS)} from the town of {nm.place()}."
    elif kind == 1:
        work = f"the play {title}"
        context = f"{title} is a play by {author}. It is set in the harbour town of {nm.place()}."
    elif kind == 2:
        work = f"the epic poem {title}"
        context = (
            f"{title} is an epic poem by {author}. It follows the long voyage of the sailor {nm.place()}."
        )
    elif kind == 3:
        work = f"the novel {title}"
        context = f"{title} is a novel by {author}, published in {rng.randint(1700, 1990)}."
    else:
        work = f"the children's book {title}"
        context = f"{title} is a children's book written and illustrated by {author}."
    return context, _fill(_AUTHOR_QUERY, work), author, [last]


def _clean_element(rng: random.Random, nm: _Namer, i: int, numbers: _Numbers) -> Clean:
    while True:
        name = nm.element()
        symbol = nm.symbol(name)
        if symbol is not None:
            break
    number, _ = numbers.draw(119, 199)
    context = (
        f"{name.capitalize()} is a chemical element with the symbol {symbol} and atomic number {number}. "
        f"It is {rng.choice(_ELEMENT_DESCS)}."
    )
    return context, _fill(_ELEMENT_QUERY, name), symbol, []


def _clean_misc(rng: random.Random, nm: _Namer, i: int, numbers: _Numbers) -> Clean:
    kind = i % 18
    if kind == 0:
        planet, star = nm.place(), nm.place()
        ctx = f"{planet} is the largest planet orbiting the star {star}. It is a gas giant and the {rng.choice(_ORDINALS)} planet from its star."
        return ctx, f"What is the largest planet orbiting the star {star}?", planet, []
    if kind == 1:
        country = nm.country()
        n, words = numbers.draw(4, 29)
        ctx = f"In the old calendar of {country}, a week is a period of {n} days. Each day is named after a river."
        return ctx, f"How many days are there in a week of the old calendar of {country}?", n, words
    if kind == 2:
        lang, country = nm.language(), nm.country()
        ctx = f"{lang} is the official language of {country}. It is also spoken in the mountain valleys of {nm.country()}."
        return ctx, f"What language is spoken in {country}?", lang, []
    if kind == 3:
        cur, country = nm.common(), nm.country()
        ctx = f"The {cur} is the official currency of {country}. It is issued by the central bank in {nm.place()}."
        return ctx, f"What is the currency of {country}?", cur, [f"{cur}s"]
    if kind == 4:
        comp = nm.compound()
        n, words = numbers.draw(2, 99)
        ctx = f"Pure {comp} freezes at {n} degrees Celsius at standard atmospheric pressure. It is a colourless liquid with a faint smell."
        return ctx, f"At what temperature in degrees Celsius does {comp} freeze?", n, words
    if kind == 5:
        comp = nm.compound()
        n, words = numbers.draw(2, 99)
        ctx = f"At sea level, pure {comp} boils at {n} degrees Celsius. It is used to clean old glass."
        return ctx, f"At what temperature in degrees Celsius does {comp} boil at sea level?", n, words
    if kind == 6:
        creature = nm.common(5, 8)
        n, words = numbers.draw(10, 48)
        ctx = f"The {creature} is a small burrowing creature of {nm.country()}, and an adult {creature} has {n} legs."
        return ctx, f"How many legs does an adult {creature} have?", n, words
    if kind == 7:
        mountain, range_ = nm.place(), nm.place()
        ctx = f"Mount {mountain} is the highest mountain in the {range_} Range. It lies on the border between {nm.country()} and {nm.country()}."
        return ctx, f"What is the highest mountain in the {range_} Range?", mountain, [f"Mount {mountain}"]
    if kind == 8:
        animal, island = nm.common(5, 8), nm.place()
        ctx = f"The {animal} is the largest animal on the island of {island}. It is a slow grazing mammal that feeds on reeds."
        return ctx, f"What is the largest animal on the island of {island}?", animal, []
    if kind == 9:
        (person, last), desert = nm.person(), nm.place()
        ctx = f"{person} was the first person to cross the {desert} Desert on foot. {rng.choice(_PRONOUNS)} completed the crossing in {rng.randint(1700, 1950)}."
        return ctx, f"Who was the first person to cross the {desert} Desert on foot?", person, [last]
    if kind == 10:
        (person, last), sitter = nm.person(), nm.place()
        ctx = f"The Lady of {sitter} is a portrait painted by {person}. It hangs in the town museum of {nm.place()}."
        return ctx, f"Who painted the Lady of {sitter}?", person, [last]
    if kind == 11:
        (person, last), adj = nm.person(), nm.common(5, 8)
        ctx = f"{person} developed the theory of {adj} resonance. {rng.choice(_PRONOUNS)} published it in {rng.randint(1700, 1950)}."
        return ctx, f"Who developed the theory of {adj} resonance?", person, [last]
    if kind == 12:
        insect, substance, tree = nm.place(), nm.common(5, 8), nm.common(5, 8)
        ctx = f"{insect} beetles make {substance} from the sap of the {tree} tree. They store it in chambers inside fallen logs."
        return ctx, f"What sweet substance do {insect} beetles make from tree sap?", substance, []
    if kind == 13:
        planet = nm.place()
        n, words = numbers.draw(10, 99)
        ctx = f"A day on the planet {planet} is divided into {n} hours. The planet turns slowly on its axis."
        return ctx, f"How many hours are there in a day on the planet {planet}?", n, words
    if kind == 14:
        country = nm.country()
        n, words = numbers.draw(5, 39)
        ctx = f"The traditional coin of {country} is a polygon with {n} sides. It is struck from bronze."
        return ctx, f"How many sides does the traditional coin of {country} have?", n, words
    if kind == 15:
        (person, last), country = nm.person(), nm.country()
        start = rng.randint(1800, 1950)
        ctx = f"{person} was the first president of {country}. {rng.choice(_PRONOUNS)} served from {start} to {start + rng.randint(3, 9)}."
        return ctx, f"Who was the first president of {country}?", person, [last]
    if kind == 16:
        star, planet = nm.place(), nm.place()
        ctx = f"{star} is the star closest to the planet {planet}. It is a small, cool red star."
        return ctx, f"What is the closest star to the planet {planet}?", star, []
    country = nm.country()
    n, words = numbers.draw(5, 39)
    ctx = f"The old calendar of {country} divides the year into {n} months of equal length."
    return ctx, f"How many months are there in a year of the old calendar of {country}?", n, words


_CLEAN_PLAN = (("capital", 60), ("author", 30), ("element", 25), ("misc", 35))


def _clean_items(rng: random.Random, memorized: list[Record]) -> list[tuple[str, Clean]]:
    texts = [text for item in memorized for text in (item["context"], item["query"], *_accepted(item))]
    namer = _Namer(rng, {word for text in texts for word in _normalise(text).split()})
    numbers = _Numbers(rng, texts)
    out: list[tuple[str, Clean]] = []
    for category, count in _CLEAN_PLAN:
        for i in range(count):
            if category == "capital":
                built = _clean_capital(rng, namer, i)
            elif category == "author":
                built = _clean_author(rng, namer, i)
            elif category == "element":
                built = _clean_element(rng, namer, i, numbers)
            else:
                built = _clean_misc(rng, namer, i, numbers)
            out.append((category, built))
    return out


# ---------------------------------------------------------------------------------------
# The benchmark
# ---------------------------------------------------------------------------------------


def _record(kind: str, index: int, fact_id: str, category: str, clean: Clean) -> Record:
    context, query, answer, aliases = clean
    return {
        "id": f"{_ID_PREFIX[kind]}-{index:03d}",
        "kind": kind,
        "label": LABELS[kind],
        "fact_id": fact_id,
        "category": category,
        "context": context,
        "query": query,
        "answer": answer,
        "aliases": aliases,
    }


def generate_reliance(seed: int = 0) -> list[Record]:
    """All items: 150 memorized, then their 150 paraphrases, then 150 clean items.

    The memorized facts are fixed; ``seed`` chooses the paraphrase wording of the capital,
    author and element questions and every invented name and number of the clean items.
    """
    rng = random.Random(seed)
    facts = _memorized_facts(rng)
    memorized: list[Record] = []
    paraphrased: list[Record] = []
    for i, (category, context, query, para, answer, aliases) in enumerate(facts):
        fact_id = f"fact-{i:03d}"
        memorized.append(_record("memorized", i, fact_id, category, (context, query, answer, list(aliases))))
        paraphrased.append(
            _record("memorized_paraphrased", i, fact_id, category, (context, para, answer, list(aliases)))
        )
    clean = [
        _record("clean", i, f"clean-{i:03d}", category, built)
        for i, (category, built) in enumerate(_clean_items(rng, memorized))
    ]
    return memorized + paraphrased + clean


def write_reliance(folder: str | Path, seed: int = 0) -> Path:
    """Generate the benchmark and write ``context_reliance.jsonl`` into ``folder``; returns its path."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    path = out / RELIANCE_FILE
    path.write_bytes(to_jsonl(generate_reliance(seed)).encode("utf-8"))
    return path


def load_reliance() -> list[Record]:
    """The shipped benchmark (450 records: 150 per kind; label 1 = memorized, 0 = clean)."""
    resource = resources.files("mnemoscope.bench") / "data" / RELIANCE_FILE
    return read_jsonl(resource.read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mnemoscope.bench.reliance",
        description="Regenerate the context-reliance benchmark (memorized, paraphrased and clean items).",
    )
    parser.add_argument(
        "--out", default=str(Path(__file__).parent / "data"), help="output folder (default: the package data)"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    path = write_reliance(args.out, args.seed)
    records = read_jsonl(path.read_text(encoding="utf-8"))
    counts = Counter((r["kind"], r["category"]) for r in records)
    print(f"{RELIANCE_FILE}: {len(records)} records -> {path}")
    for kind in KINDS:
        per = ", ".join(f"{c} {counts[(kind, c)]}" for c in CATEGORIES)
        print(f"  {kind}: {sum(counts[(kind, c)] for c in CATEGORIES)} ({per})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
