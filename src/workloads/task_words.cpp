#include "workloads/task_words.h"

#include <algorithm>
#include <set>

namespace agentkv {

const std::vector<std::string>& task_nouns() {
  static const std::vector<std::string> words = {
      "apple",    "banana",  "cherry",  "garden",  "river",   "mountain", "window",  "pencil",   "bottle",
      "candle",   "basket",  "blanket", "bridge",  "castle",  "chair",    "cloud",   "coffee",   "cookie",
      "copper",   "cotton",  "desert",  "doctor",  "dragon",  "engine",   "farmer",  "feather",  "forest",
      "fountain", "glass",   "guitar",  "hammer",  "harbor",  "helmet",   "island",  "jacket",   "jungle",
      "kettle",   "kitten",  "ladder",  "lemon",   "letter",  "lizard",   "magnet",  "marble",   "meadow",
      "mirror",   "monkey",  "needle",  "ocean",   "orange",  "oyster",   "palace",  "parrot",   "pepper",
      "piano",    "pillow",  "planet",  "pocket",  "potato",  "puzzle",   "rabbit",  "rocket",   "saddle",
      "salmon",   "sandal",  "shadow",  "silver",  "singer",  "spider",   "spoon",   "squirrel", "stone",
      "sugar",    "summer",  "tablet",  "teacher", "ticket",  "tiger",    "tomato",  "tunnel",   "turtle",
      "valley",   "violin",  "wagon",   "walnut",  "whistle", "winter",   "wizard",  "yogurt",   "zebra",
      "anchor",   "badge",   "barrel",  "beacon",  "biscuit", "blossom",  "bucket",  "butter",   "cabin",
      "camera",   "canvas",  "carpet",  "cereal",  "chimney", "circus",   "compass", "crayon",   "crystal",
      "dolphin",  "donkey",  "falcon",  "ferry",   "fiddle",  "flute",    "garlic",  "ginger",   "goblet",
      "gravel",   "hazel",   "honey",   "jelly",   "kernel",  "lantern",  "lobster", "mango",    "mitten",
      "mustard",  "napkin",  "noodle",  "olive",   "onion",   "paddle",   "peanut",  "pebble",   "pigeon",
      "pirate",   "plum",    "pumpkin", "quilt",   "radish",  "raven",    "ribbon",  "saucer",   "scarf",
      "shovel",   "slipper", "sponge",  "stapler", "sweater", "thimble",  "timber",  "trumpet",  "tulip",
      "umbrella", "velvet",  "vessel",  "walrus",  "wheat",   "willow",
  };
  return words;
}

std::vector<std::string> task_pick_nouns(std::mt19937_64& rng, size_t n) {
  std::vector<std::string> w = task_nouns();
  std::shuffle(w.begin(), w.end(), rng);
  w.resize(std::min(n, w.size()));
  return w;
}

namespace {

std::vector<std::string> random_strings(std::mt19937_64& rng, size_t n, size_t len, char first) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  while (out.size() < n) {
    std::string s;
    for (size_t i = 0; i < len; ++i) s += static_cast<char>(first + static_cast<int>(rng() % 26));
    if (seen.insert(s).second) out.push_back(s);
  }
  return out;
}

}  // namespace

std::vector<std::string> task_coded_words(std::mt19937_64& rng, size_t n, size_t len) {
  return random_strings(rng, n, len, 'a');
}

std::vector<std::string> task_variable_names(std::mt19937_64& rng, size_t n, size_t len) {
  return random_strings(rng, n, len, 'A');
}

}  // namespace agentkv
