"""Hand-written captions with the concepts and scene graphs a careful reader would extract.

Each case: caption, noun phrases (in order), scene-graph edges as (relation, subject, object)
given by node text. Grouped by the construction they exercise.
"""

CASES = [
    # determiners, adjectives, spatial two-word relations
    ("A red couch next to a white table.", ["A red couch", "a white table"], [("next to", "A red couch", "a white table")]),
    ("A white couch next to a red table.", ["A white couch", "a red table"], [("next to", "A white couch", "a red table")]),
    ("The tall building behind a small tree", ["The tall building", "a small tree"], [("behind", "The tall building", "a small tree")]),
    ("a black cat above a white dog", ["a black cat", "a white dog"], [("above", "a black cat", "a white dog")]),
    ("a small bird under a large umbrella", ["a small bird", "a large umbrella"], [("under", "a small bird", "a large umbrella")]),
    ("A cup to the left of a plate.", ["A cup", "a plate"], [("to the left of", "A cup", "a plate")]),
    ("a lamp to the right of the bed", ["a lamp", "the bed"], [("to the right of", "a lamp", "the bed")]),
    ("a dog in front of a red car", ["a dog", "a red car"], [("in front of", "a dog", "a red car")]),
    ("A bowl on top of a wooden table", ["A bowl", "a wooden table"], [("on top of", "A bowl", "a wooden table")]),
    ("a vase in the middle of the table", ["a vase", "the table"], [("in the middle of", "a vase", "the table")]),
    ("a chair close to the window", ["a chair", "the window"], [("close to", "a chair", "the window")]),
    ("a green apple on a plate", ["a green apple", "a plate"], [("on", "a green apple", "a plate")]),
    ("a bike near a brick wall", ["a bike", "a brick wall"], [("near", "a bike", "a brick wall")]),
    ("A cat on a mat.", ["A cat", "a mat"], [("on", "A cat", "a mat")]),
    # coordination of modifiers and of nouns
    (
        "a red and white bus parked on the street",
        ["a red and white bus", "the street"],
        [("parked on", "a red and white bus", "the street")],
    ),
    ("a black and white photo of a dog", ["a black and white photo", "a dog"], [("of", "a black and white photo", "a dog")]),
    ("a cat and a dog on a sofa", ["a cat", "a dog", "a sofa"], [("on", "a dog", "a sofa")]),
    (
        "Two women and a child walk past a store.",
        ["Two women", "a child", "a store"],
        [("walk past", "Two women", "a store"), ("walk past", "a child", "a store")],
    ),
    (
        "A woman is holding a cup and a saucer.",
        ["A woman", "a cup", "a saucer"],
        [("holding", "A woman", "a cup"), ("holding", "A woman", "a saucer")],
    ),
    # compounds and numbers
    ("two fire hydrants on a sidewalk", ["two fire hydrants", "a sidewalk"], [("on", "two fire hydrants", "a sidewalk")]),
    ("a stop sign at an intersection", ["a stop sign", "an intersection"], [("at", "a stop sign", "an intersection")]),
    ("three tennis players on a clay court", ["three tennis players", "a clay court"], [("on", "three tennis players", "a clay court")]),
    ("A traffic light above a busy road.", ["A traffic light", "a busy road"], [("above", "A traffic light", "a busy road")]),
    ("Four giraffes stand in a grassy field.", ["Four giraffes", "a grassy field"], [("stand in", "Four giraffes", "a grassy field")]),
    # verbs with objects
    ("a man riding a horse", ["a man", "a horse"], [("riding", "a man", "a horse")]),
    (
        "a man riding a horse on the beach",
        ["a man", "a horse", "the beach"],
        [("riding", "a man", "a horse"), ("riding on", "a man", "the beach")],
    ),
    ("A boy throws a frisbee.", ["A boy", "a frisbee"], [("throws", "A boy", "a frisbee")]),
    ("a girl eating a slice of pizza", ["a girl", "a slice", "pizza"], [("eating", "a girl", "a slice"), ("of", "a slice", "pizza")]),
    (
        "A chef cuts vegetables in a kitchen.",
        ["A chef", "vegetables", "a kitchen"],
        [("cuts", "A chef", "vegetables"), ("cuts in", "A chef", "a kitchen")],
    ),
    (
        "a laptop sitting on a desk beside a lamp",
        ["a laptop", "a desk", "a lamp"],
        [("sitting on", "a laptop", "a desk"), ("sitting beside", "a laptop", "a lamp")],
    ),
    # possessives
    ("the man's dog is lying under the table", ["the man's dog", "the table"], [("lying under", "the man's dog", "the table")]),
    ("A woman's red umbrella on the ground", ["A woman's red umbrella", "the ground"], [("on", "A woman's red umbrella", "the ground")]),
    ("a boy and his dog in a park", ["a boy", "his dog", "a park"], [("in", "his dog", "a park")]),
    # passive voice
    ("a pizza being cut by a woman", ["a pizza", "a woman"], [("cut by", "a pizza", "a woman")]),
    ("The ball was kicked by a young boy.", ["The ball", "a young boy"], [("kicked by", "The ball", "a young boy")]),
    ("a table covered with a white cloth", ["a table", "a white cloth"], [("covered with", "a table", "a white cloth")]),
    # relative clauses
    ("A cat that is sleeping on a bed.", ["A cat", "a bed"], [("sleeping on", "A cat", "a bed")]),
    ("a man who is wearing a blue hat", ["a man", "a blue hat"], [("wearing", "a man", "a blue hat")]),
    ("a truck which is parked near a tree", ["a truck", "a tree"], [("parked near", "a truck", "a tree")]),
    # pronouns are dropped, and so are edges to them
    ("It is on top of a fridge.", ["a fridge"], []),
    ("They are playing with a ball.", ["a ball"], []),
    ("Someone holding a phone", ["a phone"], []),
    # copulas add nothing to the relation
    ("The book is on the shelf.", ["The book", "the shelf"], [("on", "The book", "the shelf")]),
    ("A lamp is beside the sofa.", ["A lamp", "the sofa"], [("beside", "A lamp", "the sofa")]),
    # a personal pronoun stands for the nearest earlier subject (or "there is" noun) of its number
    ("there is a brown star, and it is to the left of the black triangle", ["a brown star", "the black triangle"],
     [("to the left of", "a brown star", "the black triangle")]),
    ("the dogs sit on a mat and they are next to a cat", ["the dogs", "a mat", "a cat"],
     [("sit on", "the dogs", "a mat"), ("next to", "the dogs", "a cat")]),
    ("there are two cats and it is on a mat", ["two cats", "a mat"], []),
    # no noun at all
    ("running fast", [], []),
    ("very bright and colorful", [], []),
    ("", [], []),
]

# The optional mode keeps a prepositional modifier with its noun.
WITH_PREP = [
    ("a man in a red shirt", ["a man in a red shirt", "a red shirt"]),
    ("a bowl of soup on a table", ["a bowl of soup", "soup", "a table"]),
    ("a girl with a kite", ["a girl with a kite", "a kite"]),
]
