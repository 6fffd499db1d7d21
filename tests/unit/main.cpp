// The single translation unit that defines the Boost.Test module and its
// main(); every tests/unit/*_test.cpp adds suites to it.
#define BOOST_TEST_MODULE tenure_unit
#include <boost/test/unit_test.hpp>
