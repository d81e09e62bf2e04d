// One word per kind of actor (messages/actor_kind.hpp): what `ls` shows,
// what an operator types (singular or plural), the actor's own name.
#define BOOST_TEST_MODULE actor_kind
#include <boost/test/unit_test.hpp>

#include "messages/actor_kind.hpp"

using namespace egress;

BOOST_AUTO_TEST_CASE(every_kind_reads_back_from_its_word_and_its_plural) {
  for (int i = 0; i <= static_cast<int>(actor_kind::cluster); ++i) {
    auto k = static_cast<actor_kind>(i);
    std::string word = to_string(k);
    BOOST_CHECK_NE(word, "unknown");
    BOOST_CHECK(actor_kind_from(word) == k);
    BOOST_CHECK(actor_kind_from(word + "s") == k);
  }
  BOOST_CHECK(actor_kind_from("proxies") == actor_kind::proxy);
}

BOOST_AUTO_TEST_CASE(other_words_name_no_kind) {
  for (auto w : {"", "all", "host_link", "linkss", "Link", "call_worker", "s"})
    BOOST_CHECK_MESSAGE(!actor_kind_from(w), w);
}

BOOST_AUTO_TEST_CASE(an_actors_name_is_its_kind_and_its_name) {
  BOOST_CHECK_EQUAL(actor_name(actor_kind::link, "hv1"), "link/hv1");
  BOOST_CHECK_EQUAL(actor_name(actor_kind::image, "base@hv2"), "image/base@hv2");
}
